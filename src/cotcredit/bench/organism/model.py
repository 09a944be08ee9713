"""The organism's tokenizer and architecture: a byte-level BPE (`tokenizers`) with a chat
template, and a `LlamaForCausalLM` of a few million parameters.

The tokenizer is trained on the task's own text, so every number 0..19 is one token with and
without a leading space ("37", " 37"): p(Y* | prefix ⊕ "The answer is ") is then the probability
of one token, and "1" is never credited for "13". The chat template is a plain user/assistant
format; `cotcredit` renders prompts with it like any user model's.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import LlamaConfig, PreTrainedTokenizerFast

from cotcredit.bench.organism.task import MAX_VALUE, split_problems

SPECIALS = ("<|pad|>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
VOCAB_SIZE = 512


def build_tokenizer(corpus: Sequence[str] | None = None, max_length: int = 256,
                    max_number: int = MAX_VALUE) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained (deterministically) on task texts: `corpus` (a regime's prompts
    and solutions; default: 3,000 chain problems), plus every number 0..`max_number` with and
    without a leading space, often enough that each is one token. `max_length`: the longest
    sequence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=list(SPECIALS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    if corpus is None:
        corpus = [p.prompt + "\n" + p.solution for p in split_problems({"train": 3000})["train"]]
    numbers = [" ".join(str(v) for v in range(max_number + 1))] * 20  # both forms, often
    numbers += ["\n".join(str(v) for v in range(max_number + 1))] * 20
    tk.train_from_iterator([*corpus, *numbers], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<|pad|>", eos_token="<|end|>", bos_token=None,
        unk_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = max_length
    return tok


def build_config(tokenizer, *, hidden: int = 128, layers: int = 3, heads: int = 4,
                 positions: int = 256) -> LlamaConfig:
    """A small Llama: `layers` x `hidden`, tied embeddings, `positions` positions."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 4,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, rms_norm_eps=1e-6,
    )
