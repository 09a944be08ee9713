"""A byte-level BPE tokenizer padded to a model's real vocabulary, and synthetic reasoning traces
of a given length with their answer and reference solutions."""

from __future__ import annotations

import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from cotcredit.data.trace import Trace
from cotcredit.lm import Scorer
from cotcredit.methods import rredcot

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (see build_config)
PROMPT = "Apples cost 3 dollars and oranges cost 2 dollars. What do 4 apples and 5 oranges cost?"
ANSWER = "22"
SOLUTION = "4 apples cost 4 * 3 = 12 dollars and 5 oranges cost 5 * 2 = 10 dollars, so the total " \
           "is 12 + 10 = 22 dollars."
LINES = [
    "Let me compute the cost of the apples first: 4 apples at 3 dollars each is 12 dollars.",
    "Wait, I should double-check the price of the oranges in the table.",
    "So the oranges cost 2 dollars each, and 5 of them cost 10 dollars.",
    "Hmm, the question asks for the total, so I add the two amounts.",
    "But maybe the apples were 4 dollars? No, the table says 3 dollars.",
    "Therefore the total is 12 + 10 = 22 dollars.",
    "Actually, let me verify once more by adding item by item: step {i} gives {v}.",
    "Alternatively, 4 * 3 + 5 * 2 = 22, which matches.",
]
# Other valid paths to the answer: v̂ over several references (`methods/rredcot/probes.py`).
OTHER_SOLUTIONS = [
    "5 oranges cost 5 * 2 = 10 dollars.\n4 apples cost 4 * 3 = 12 dollars.\n"
    "Together they cost 10 + 12 = 22 dollars.",
    "An apple and an orange cost 3 + 2 = 5 dollars.\nFour such pairs cost 4 * 5 = 20 dollars.\n"
    "One more orange makes 20 + 2 = 22 dollars.",
    "4 * 3 + 5 * 2 = 12 + 10 = 22.",
]
REFERENCES = [SOLUTION, *OTHER_SOLUTIONS]


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the trace sentences, padded with filler tokens (" qab",
    ...) to `vocab_size`, so every id a random model samples decodes to text."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(600, vocab_size), special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [*LINES, PROMPT, SOLUTION, "</think>\n\nThe final answer is $\\boxed{22}$."]
    tk.train_from_iterator(corpus * 4, trainer)
    state = json.loads(tk.to_str())["model"]
    vocab: dict[str, int] = dict(state["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    n = 0
    while len(vocab) < vocab_size:  # fillers: never produced by encoding, decoded as words
        word, k = "", n
        while True:
            word, k = word + chr(ord("a") + k % 26), k // 26
            if not k:
                break
        n += 1
        token = "\u0120q" + word  # \u0120 is byte-level BPE's space
        if token not in vocab:
            vocab[token] = len(vocab)
    full = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    full.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    full.decoder = decoders.ByteLevel()
    full.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=full, eos_token="<|im_end|>", pad_token="<|im_end|>",
        bos_token="<|im_start|>", unk_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def synthetic_trace(tok, n_tokens: int, prompt_len: int) -> Trace:
    """A reasoning trace with line breaks and discourse keywords whose prompt + reasoning is
    about `n_tokens` tokens (cut at a line end), with its answer and a reference solution."""
    lines, i = [], 0
    per_line = 24  # grown until the text is long enough
    want = max(8, n_tokens - prompt_len)
    while True:
        while len(lines) < want // per_line + 2:
            lines.append(LINES[i % len(LINES)].format(i=i, v=3 * i))
            i += 1
        text = "\n".join(lines)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) > want:
            break
        per_line = max(1, per_line // 2)
    cut = enc["offset_mapping"][want][0]
    cut = text.rfind("\n", 0, cut) if "\n" in text[:cut] else cut
    reasoning = text[:cut]
    return Trace(
        id=f"synthetic-{n_tokens}", prompt=PROMPT,
        response=reasoning + "\n</think>\n\nThe final answer is $\\boxed{22}$.",
        answer=ANSWER, solution=SOLUTION, outcome=1.0,
    )


def trace_for(scorer: Scorer, n_tokens: int) -> Trace:
    return synthetic_trace(scorer.tokenizer, n_tokens, len(scorer.encode_prompt(PROMPT)))


def rhat_options(value: str = "rhat", probe_mode: str = "packed") -> rredcot.RredcotOptions:
    return rredcot.RredcotOptions(value=value, probe_mode=probe_mode).validate()
