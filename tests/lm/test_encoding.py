"""Tokenization: one rule for traces and completions, probe blocks tokenized as the model writes
them (no seams between E, Y*, C and U*), and SentencePiece word-start markers kept out."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.lm.encoding import EXIT_PLAIN, ForcingOptions, answer_forcing, encode_parts
from cotcredit.methods import TraceContext
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.methods.rredcot import run as rredcot_run
from cotcredit.segmentation import SegmentOptions, segment_encoded

LATEX = "\\frac{1}{2}"


@pytest.fixture(scope="module")
def latex_bpe():
    """A byte-level BPE whose vocabulary merges across `\\boxed{` and a LaTeX answer."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = ["The final answer is $\\boxed{\\frac{1}{2}}$ and $\\boxed{\\frac{3}{4}}$."] * 50
    trainer = trainers.BpeTrainer(vocab_size=300,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk)


@pytest.fixture(scope="module")
def sentencepiece():
    """A SentencePiece-style tokenizer (Metaspace): text on its own starts with a '▁' marker."""
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789{}$\\+=.\n ")
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>"], initial_alphabet=alphabet
    )
    tk.train_from_iterator(["The final answer is $\\boxed{7}$. So 3 + 4 = 7."] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")


def test_answer_is_tokenized_with_the_exit_string(latex_bpe):
    joint = latex_bpe.encode(EXIT_PLAIN + LATEX, add_special_tokens=False)
    apart = latex_bpe.encode(EXIT_PLAIN, add_special_tokens=False) + latex_bpe.encode(
        LATEX, add_special_tokens=False
    )
    assert joint != apart  # the seam merges: scoring the split would score text never written
    parts = encode_parts(latex_bpe, [(EXIT_PLAIN, None), (LATEX, "answer")])
    assert parts.ids == joint
    a, b = parts.span("answer")
    assert b == len(joint)
    # The answer's tokens cover all of it; the first may carry the end of E with it.
    scored = latex_bpe.decode(parts.ids[a:])
    assert scored.endswith(LATEX) and EXIT_PLAIN.endswith(scored[: -len(LATEX)])
    assert scored != LATEX  # here the first answer token straddles the seam ("{\\")
    assert latex_bpe.decode(parts.ids[:a]) + scored == EXIT_PLAIN + LATEX


def test_sentencepiece_answer_gets_no_word_start_marker(sentencepiece):
    alone = sentencepiece.convert_ids_to_tokens(sentencepiece.encode("7", add_special_tokens=False))
    assert alone[0].startswith("▁")  # encoding the answer on its own adds a word-start marker
    parts = encode_parts(sentencepiece, [(EXIT_PLAIN, None), ("7", "answer")])
    tokens = sentencepiece.convert_ids_to_tokens(parts.ids)
    a, b = parts.span("answer")
    assert tokens[a:b] == ["7"]
    assert tokens[0] != "▁"  # nor a marker before E: it continues a prefix
    assert sentencepiece.decode(parts.ids) == EXIT_PLAIN + "7"


def test_solution_probe_spans_cover_their_texts(scorer: Scorer):
    forcing = answer_forcing(scorer, ForcingOptions())
    solution = "Apples cost 5 and oranges 7, so 5 + 7 = 12."
    probe = forcing.solution_probe("\n", solution, "12")
    u0, u1 = probe.span("solution")
    y0, y1 = probe.span("answer")
    tok = scorer.tokenizer
    assert u0 < u1 <= y0 < y1 == len(probe.ids)
    assert tok.decode(probe.ids) == "\n" + solution + forcing.exit_string + "12"
    assert solution in tok.decode(probe.ids[u0:u1]) and "12" in tok.decode(probe.ids[y0:y1])


def test_empty_prompt_without_bos_is_one_line_error(scorer: Scorer):
    plain = scorer.with_options(type(scorer.options)(chat_template=False))
    with pytest.raises(UserError, match="the prompt gives no tokens"):
        plain.encode(Trace("e", "", "Let me think.\nThe answer is 1.", "1"))


def test_training_and_analysis_encode_a_completion_alike(scorer: Scorer):
    """The same completion gives the same tokens, segments and rewards in `redistribute` and in
    training's scoring, including a token straddling the start of the final-answer statement."""
    from cotcredit.training.scoring import PolicySegmentRewards

    response = (
        "Let me add the prices.\nApples cost 5 dollars.\nWait, oranges cost 7.\n"
        "So 5 + 7 = 12. The final answer is $\\boxed{12}$."
    )
    trace = Trace("c", "Apples cost 5, oranges 7. Total?", response, "12",
                  solution="5 + 7 = 12. The final answer is $\\boxed{12}$.", outcome=1.0)
    tok = scorer.tokenizer
    prompt_ids = scorer.encode_prompt(trace.prompt)
    completion_ids = tok.encode(response, add_special_tokens=False) + [tok.eos_token_id]

    analysis = scorer.encode(trace, reserve=64)
    training = scorer.encode_completion(trace, prompt_ids, completion_ids, reserve=64)
    assert training.reasoning_ids == analysis.reasoning_ids
    assert training.token_starts == analysis.token_starts
    assert training.cuttable == analysis.cuttable
    assert analysis.reasoning_text.endswith("= 12.")  # " The" straddles: it is the answer's

    fn = PolicySegmentRewards(scorer.model, tok, segments=3, value="both")
    rewards, spans = fn(prompt_ids, completion_ids, example={"answer": "12",
                                                             "solution": trace.solution})
    fwd = scorer.forward(analysis.ids)
    seg = segment_encoded(analysis, fwd.entropies, SegmentOptions(segments=3))
    rows = rredcot_run(TraceContext(scorer, analysis, fwd, seg),
                       RredcotOptions(value="both", sum_to="advantage"))["rredcot"]
    assert spans == [(s.token_start, s.token_end) for s in seg.segments]
    assert rewards == pytest.approx([r["score"] for r in rows], abs=1e-6)


def test_solution_probe_ends_before_the_solutions_own_answer(scorer: Scorer):
    forcing = answer_forcing(scorer, ForcingOptions())
    probe = forcing.solution_probe("\n", "5 + 7 = 12.\nThe final answer is $\\boxed{12}$.", "12")
    u0, u1 = probe.span("solution")
    assert scorer.tokenizer.decode(probe.ids[u0:u1]) == "5 + 7 = 12."  # E states the answer
    assert scorer.tokenizer.decode(probe.ids) == "\n5 + 7 = 12." + forcing.exit_string + "12"


def test_a_prompt_already_in_the_chat_format_is_not_wrapped_twice(scorer):
    """Few-shot conversations and traces logged with their template are used as they are, in
    analysis and in training alike; plain prompts get the template."""
    from cotcredit.lm.encoding import rendered_by_template, template_markers
    from cotcredit.training.run import prompt_field

    tok = scorer.tokenizer
    assert set(template_markers(tok)) >= {"<|im_start|>", "<|im_end|>"}
    plain = "What is 3 + 4?"
    shown = scorer.render_prompt(plain)
    assert shown != plain and not rendered_by_template(tok, plain)
    assert rendered_by_template(tok, shown)
    assert scorer.render_prompt(shown) == shown
    assert scorer.encode_prompt(shown) == scorer.encode_prompt(plain)
    assert prompt_field(shown, True, None, tok) == shown
    assert prompt_field(plain, True, None, tok) == [{"role": "user", "content": plain}]
