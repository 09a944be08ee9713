"""Sampling graded traces from a problem set: what `cotcredit generate` does.

Each problem's `samples` responses are graded against its answer and written as trace lines
(id ``<problem id>-s<j>``, the problem's own prompt, ``correct``, ``problem_id`` and the
sampling options), appended and synced once the problem is done. A rerun skips complete
problems (a larger --samples adds the missing ones: sample j is the same whenever it is
drawn) and refuses a file written with other sampling options unless `overwrite`.

Under a launcher (`torchrun`, `accelerate launch`) each process samples the problems whose id
hashes to it into its own hidden part file beside the output, and the main process appends the
parts to the output in problem order at the end (and at the start, what a killed launch left),
so the file has what one process would write, each trace once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cotcredit import distributed
from cotcredit.data import grading
from cotcredit.data.problems import Problem, ProblemInputOptions, parse_problem, read_problems
from cotcredit.data.trace import FieldNames, reasoning_end
from cotcredit.errors import UserError
from cotcredit.lm.generation import SamplingSettings
from cotcredit.lm.sampling import get_generator
from cotcredit.options import option

# The problem-set names a caller of `generate_traces` needs (`cotcredit.problems` held both).
__all__ = ["GenerateOptions", "GenerateSummary", "Problem", "ProblemInputOptions",
           "generate_traces", "parse_problem", "read_problems"]

# Fields of an output line that must match for a file to be resumed.
_RUN_FIELDS = ("model", "temperature", "top_p", "max_new_tokens", "seed", "backend",
               "chat_template", "system_prompt")


@dataclass(frozen=True)
class GenerateOptions(SamplingSettings):
    """How traces are sampled from problems."""

    samples: int = option(4, short="-n", help="Responses sampled per problem.")

    def validate(self) -> GenerateOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        if self.samples < 1:
            raise UserError(f"--samples must be at least 1, got {self.samples}")
        self.check_sampling(self.samples)
        return self


@dataclass
class GenerateSummary:
    """What a generate run did; counts cover every line of the output (resumed ones too)."""

    output: Path
    problems: int = 0  # problems in the output
    sampled: int = 0  # problems sampled by this run
    resumed: int = 0  # problems already complete in the output
    samples: int = 0
    correct: int = 0
    truncated: int = 0
    no_reasoning: int = 0  # responses the analysis commands cannot read (empty or answer only)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the problems were read, said once
    seconds: float = 0.0
    completions_per_s: float = 0.0
    main: bool = True  # launched: whether this is the process that reports

    @property
    def accuracy(self) -> float:
        """Fraction of the output's samples graded correct (NaN without samples)."""
        return self.correct / self.samples if self.samples else float("nan")


def _existing(path: Path, run: dict) -> dict[str, list[dict]]:
    """Lines already in `path` by problem id; drops a half-written last line; refuses a file of
    another run."""
    if not path.exists():
        return {}
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give a .jsonl file path")
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):  # killed mid-write: keep whole lines only
        raw = raw[: raw.rfind(b"\n") + 1]
        with open(path, "r+b") as fh:
            fh.truncate(len(raw))
    found: dict[str, list[dict]] = {}
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{n}: not a line written by `cotcredit generate` (invalid "
                            "JSON); use another output path or --overwrite") from None
        if not isinstance(obj, dict) or "problem_id" not in obj or "sample" not in obj:
            raise UserError(f"{path}:{n}: not a line written by `cotcredit generate`; use another "
                            "output path or --overwrite")
        diff = [k for k in _RUN_FIELDS if obj.get(k) != run.get(k)]
        if diff:
            k = diff[0]
            raise UserError(f"{path}: was generated with other options ({k} {obj.get(k)!r} vs "
                            f"{run.get(k)!r} now); use another output path or --overwrite")
        found.setdefault(str(obj["problem_id"]), []).append(obj)
    return found


def _trace_line(problem: Problem, j: int, completion, graded, run: dict) -> dict:
    return {
        "id": f"{problem.id}-s{j}",
        "prompt": problem.prompt,
        "response": completion.text,
        "answer": problem.answer,
        "solution": problem.solution,
        "correct": bool(graded.correct),
        "problem_id": problem.id,
        "sample": j,
        "extracted_answer": graded.answer,
        "finish_reason": completion.finish_reason,
        "n_tokens": len(completion.token_ids),
        **run,
    }


def _usable(response: str) -> bool:
    """Whether the analysis commands can read this response (it has reasoning text)."""
    return bool(response.strip()) and bool(response[: reasoning_end(response)].strip())


def _count(summary: GenerateSummary, line: dict) -> None:
    """Add one output line to the summary's sample counts."""
    summary.samples += 1
    summary.correct += bool(line.get("correct"))
    summary.truncated += line.get("finish_reason") == "length"
    summary.no_reasoning += not _usable(str(line.get("response", "")))


def _parts(output: Path) -> list[Path]:
    """The part files of a launch's processes beside `output` (`_part_path`)."""
    return sorted(output.parent.glob(f".{output.name}.part*"))


def _part_path(output: Path, index: int) -> Path:
    """The hidden file process `index` of a launch appends its lines to."""
    return output.with_name(f".{output.name}.part{index}")


def _merge_parts(output: Path, run: dict, order: Sequence[str]) -> None:
    """Append the lines of every process's part file the output lacks, in problem (`order`,
    then any other) and sample order; then delete the parts. Main process only."""
    parts = _parts(output)
    if not parts:
        return
    have = {(pid, int(x["sample"])) for pid, lines in _existing(output, run).items()
            for x in lines}
    rank = {pid: i for i, pid in enumerate(order)}
    new = {}
    for part in parts:
        for pid, lines in _existing(part, run).items():
            for x in lines:
                new.setdefault((pid, int(x["sample"])), x)
    keys = sorted((k for k in new if k not in have), key=lambda k: (rank.get(k[0], len(rank)),
                                                                   k[0], k[1]))
    with open(output, "a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(new[k], ensure_ascii=False) + "\n" for k in keys))
        fh.flush()
        os.fsync(fh.fileno())
    for part in parts:
        part.unlink()


def generate_traces(
    problems: str | Path | Sequence[Problem],
    output: str | Path,
    *,
    model=None,
    options: GenerateOptions | None = None,
    fields: FieldNames = FieldNames(),
    on_error: str = "raise",
    max_problems: int | None = None,
    overwrite: bool = False,
    progress: bool | Callable[[int, int, int], None] = False,
    split: str | None = None,
    subset: str | None = None,
) -> GenerateSummary:
    """Sample `options.samples` graded responses per problem and append them to `output` as
    trace lines. `model`: a Scorer, ModelOptions, a model name or
    None (embedded). `progress`: True for a rich bar, or a callback (problems done, samples,
    correct) called after each problem. `split`/`subset`: of a dataset input."""
    from cotcredit.pipeline.api import scorer_for

    t0 = time.perf_counter()
    options = (options or GenerateOptions()).validate()
    notes: list[str] = []
    if isinstance(problems, (str, Path)):  # read (and checked) before the model loads
        plist, skipped = read_problems(problems, fields, on_error, max_problems, split=split,
                                       subset=subset, notes=notes)
    else:
        plist, skipped = list(problems)[:max_problems], []
    scorer = scorer_for(model, progress is True)
    output = Path(output)
    run = {"model": scorer.name, "temperature": options.temperature, "top_p": options.top_p,
           "max_new_tokens": options.max_new_tokens, "seed": options.seed,
           "backend": options.backend, "chat_template": scorer.uses_chat_template,
           "system_prompt": scorer.options.system_prompt if scorer.uses_chat_template else None}
    procs = distributed.processes()
    order = [p.id for p in plist]
    if procs.main:
        if overwrite:
            for path in (output, *_parts(output)):
                if path.is_file():
                    path.unlink()
        _merge_parts(output, run, order)  # what a killed launch left
    procs.wait()
    existing = _existing(output, run)
    summary = GenerateSummary(output=output, errors=skipped, notes=notes, main=procs.main)

    def count(line: dict) -> None:
        _count(summary, line)

    wanted = set(range(options.samples))
    todo: list[Problem] = []
    for p in plist:
        have = {int(x["sample"]) for x in existing.get(p.id, [])}
        if wanted <= have:
            summary.resumed += 1
        elif procs.takes(p.id):
            todo.append(p)
    for lines in existing.values():
        for line in lines:
            count(line)
    summary.problems = len(existing)

    gen = get_generator(scorer, options.backend, options.engine_args())
    sampling = options.sampling(options.samples)
    # Problems per generator call: enough rows to fill a batch, few enough to write often.
    if options.backend == "vllm":
        chunk = 256
    else:
        rows = options.batch_size or (64 if scorer.device.type == "cuda" else 16)
        chunk = max(1, rows // options.samples)
    bar = _Bar(len(todo), summary) if progress is True and procs.main else None
    t_gen = 0.0
    n_gen = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(output if procs.count == 1 else _part_path(output, procs.index), "a",
                  encoding="utf-8") as fh:
            for s in range(0, len(todo), chunk):
                part = todo[s : s + chunk]
                part, prompts = _encode(scorer, part, options, on_error, summary)
                if not part:
                    continue
                t1 = time.perf_counter()
                outs = gen.generate(prompts, sampling, keys=[p.id for p in part])
                t_gen += time.perf_counter() - t1
                n_gen += sum(len(cs) for cs in outs)
                for p, cs in zip(part, outs, strict=True):
                    have = {int(x["sample"]) for x in existing.get(p.id, [])}
                    lines = []
                    for j, c in enumerate(cs):
                        if j in have:
                            continue
                        graded = grading.grade_completion(c.text, p.answer)
                        lines.append(_trace_line(p, j, c, graded, run))
                    fh.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
                    fh.flush()
                    os.fsync(fh.fileno())
                    for x in lines:
                        count(x)
                    if p.id not in existing:
                        summary.problems += 1
                    summary.sampled += 1
                    if bar:
                        bar.advance()
                    elif callable(progress):
                        progress(summary.sampled, summary.samples, summary.correct)
    finally:
        if bar:
            bar.stop()
    if procs.count > 1:
        _gather(summary, procs, output, run, order, n_gen / t_gen if t_gen > 0 else 0.0)
    else:
        summary.completions_per_s = n_gen / t_gen if t_gen > 0 else 0.0
    summary.seconds = time.perf_counter() - t0
    return summary


def _gather(summary: GenerateSummary, procs, output: Path, run: dict, order: Sequence[str],
            rate: float) -> None:
    """Launched: the main process merges the parts and its summary counts the whole output,
    the problems every process sampled and their errors; the others wait for the merge."""
    every = procs.gather({"sampled": summary.sampled, "errors": summary.errors, "rate": rate})
    if procs.main:
        _merge_parts(output, run, order)
        lines = [x for xs in _existing(output, run).values() for x in xs]
        summary.problems = len({x["problem_id"] for x in lines})
        summary.samples = summary.correct = summary.truncated = summary.no_reasoning = 0
        for x in lines:
            _count(summary, x)
        summary.sampled = sum(e["sampled"] for e in every)
        summary.errors = list(dict.fromkeys(m for e in every for m in e["errors"]))
        summary.completions_per_s = sum(e["rate"] for e in every)
    procs.wait()  # merged: the output is whole for every process


def _encode(scorer, part: list[Problem], options: GenerateOptions, on_error: str,
            summary: GenerateSummary) -> tuple[list[Problem], list[list[int]]]:
    """Token ids of each problem's rendered prompt; too long ones are an error (or skipped)."""
    kept, prompts = [], []
    limit = scorer.max_context - options.max_new_tokens
    for p in part:
        ids = scorer.encode_prompt(p.prompt)
        if len(ids) > limit:
            where = f"{p.source}:{p.line}" if p.line else f"problem {p.id}"
            msg = (f"{where}: prompt ({len(ids)} tokens) + --max-new-tokens "
                   f"({options.max_new_tokens}) exceed the model's context of "
                   f"{scorer.max_context} tokens")
            if on_error != "skip":
                raise UserError(msg)
            summary.errors.append(msg)
            continue
        kept.append(p)
        prompts.append(ids)
    return kept, prompts


class _Bar:
    """A rich progress bar over problems showing the running accuracy."""

    def __init__(self, total: int, summary: GenerateSummary):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.summary = summary
        self.p = Progress(TextColumn("problems"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.description}"), TimeRemainingColumn(), transient=False)
        self.task = self.p.add_task(self._text(), total=total)
        self.p.start()

    def _text(self) -> str:
        s = self.summary
        return f"accuracy {s.accuracy:.1%} ({s.correct}/{s.samples})" if s.samples else "accuracy -"

    def advance(self) -> None:
        self.p.update(self.task, advance=1, description=self._text())

    def stop(self) -> None:
        self.p.stop()
