"""The `cotcredit` command line: parses options, builds the option objects, calls the library.

User mistakes print one line `error: file:line: reason` and exit with status 2; finished traces
are already on disk when a run stops for any reason.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cotcredit.errors import UserError

app = typer.Typer(
    name="cotcredit",
    help="Credit assignment on chain-of-thought traces: RREDCoT and its baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages stay one line when piped

# ---- options shared by the analysis commands -------------------------------------------------
Traces = Annotated[Path, typer.Argument(help="JSONL file of traces (one JSON object per line).")]
Output = Annotated[
    Path, typer.Option("-o", "--output", help="Parquet file to write (resumed if it exists).")
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Hub id, local folder or .gguf file [default: embedded SmolLM2-135M-Instruct].",
    ),
]
Device = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")]
Dtype = Annotated[
    str, typer.Option(help="auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16")
]
ChatTemplate = Annotated[
    bool,
    typer.Option(
        "--chat-template/--no-chat-template", help="Render prompts with the model's chat template."
    ),
]
SystemPrompt = Annotated[str | None, typer.Option(help="System message for the chat template.")]
Truncate = Annotated[
    bool,
    typer.Option(help="Drop the end of reasoning that does not fit the context (else: error)."),
]
Segments = Annotated[
    int, typer.Option("--segments", "-k", help="Target number of segments per trace.")
]
Keywords = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated discourse keywords that open a segment [default: built-in list]."
    ),
]
Merge = Annotated[
    str,
    typer.Option(
        help="pair: merge the adjacent pair with the lowest summed entropy; boundary: lowest entropy at the cut."
    ),
]
MinTokens = Annotated[int, typer.Option(help="Minimum tokens per segment.")]
MaxTokens = Annotated[int | None, typer.Option(help="Maximum tokens per segment.")]
SegmentsFile = Annotated[
    Path | None,
    typer.Option(help="Reuse a segmentation written by `cotcredit segment` instead of segmenting."),
]
OnError = Annotated[
    str, typer.Option(help="raise: stop at the first bad trace; skip: skip it, report it, go on.")
]
MaxTraces = Annotated[int | None, typer.Option(help="Process at most this many traces.")]
Shard = Annotated[
    str | None,
    typer.Option(help="i/n: process only the i-th of n deterministic slices of the traces."),
]
Overwrite = Annotated[bool, typer.Option(help="Replace an existing output instead of resuming it.")]
PromptField = Annotated[str | None, typer.Option(help="JSON key of the prompt.")]
ResponseField = Annotated[str | None, typer.Option(help="JSON key of the response.")]
AnswerField = Annotated[str | None, typer.Option(help="JSON key of the reference answer.")]
SolutionField = Annotated[str | None, typer.Option(help="JSON key of the reference solution.")]
OutcomeField = Annotated[str | None, typer.Option(help="JSON key of the outcome (bool or number).")]
IdField = Annotated[str | None, typer.Option(help="JSON key of the trace id.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")]


def _inputs(
    on_error,
    max_traces,
    shard,
    prompt_field,
    response_field,
    answer_field,
    solution_field,
    outcome_field,
    id_field,
):
    from cotcredit.pipeline import InputOptions, parse_shard
    from cotcredit.traces import FieldNames

    if on_error not in ("raise", "skip"):
        raise UserError(f"--on-error must be raise or skip, got '{on_error}'")
    fields = FieldNames().override(
        prompt=prompt_field,
        response=response_field,
        answer=answer_field,
        solution=solution_field,
        outcome=outcome_field,
        id=id_field,
    )
    return InputOptions(
        fields=fields, on_error=on_error, max_traces=max_traces, shard=parse_shard(shard)
    )


def _scorer(model, device, dtype, chat_template, system_prompt, truncate):
    from cotcredit.lm import ModelOptions, load_scorer

    with err.status("loading model"):
        return load_scorer(
            ModelOptions(
                model=model,
                device=device,
                dtype=dtype,
                chat_template=chat_template,
                system_prompt=system_prompt,
                truncate=truncate,
            )
        )


def _segment_options(segments, keywords, merge, min_tokens, max_tokens):
    from cotcredit.segmentation import DEFAULT_KEYWORDS, SegmentOptions

    kw = (
        DEFAULT_KEYWORDS
        if keywords is None
        else tuple(k.strip() for k in keywords.split(",") if k.strip())
    )
    return SegmentOptions(
        segments=segments, keywords=kw, merge=merge, min_tokens=min_tokens, max_tokens=max_tokens
    ).validate()


def _report(summary, quiet: bool) -> None:
    if not summary.main:  # launched: the main process reports for every process
        return
    for note in summary.notes:
        err.print(f"note: {note}")
    if summary.errors:
        err.print(f"skipped {len(summary.errors)} trace(s):")
        for e in summary.errors[:20]:
            err.print(f"  {e}", markup=False, highlight=False)
        if len(summary.errors) > 20:
            err.print(f"  ... and {len(summary.errors) - 20} more")
    if quiet:
        return
    paths = ", ".join(sorted({str(p) for p in summary.outputs.values()}))
    err.print(
        f"{len(summary.scored)} trace(s) scored, {len(summary.resumed)} already done, "
        f"{len(summary.errors)} skipped in {summary.seconds:.1f} s -> {paths}",
        highlight=False,
    )


def _shown(summary, label: str, show: str) -> list[dict]:
    """Rows of the trace `--show` names (or this run's first), read back from the output."""
    if not summary.main or not summary.scored:
        return []
    tid = summary.scored[0] if show == "first" else show
    if tid not in summary.scored:
        raise UserError(f"--show {tid}: no such trace in this run")
    return summary.read_rows(label, trace_id=tid)


def _show(rows: list[dict], trace_id: str | None, columns: list[str]) -> None:
    if not rows:
        return
    tid = trace_id or rows[0]["trace_id"]
    sel = [r for r in rows if r["trace_id"] == tid]
    if not sel:
        raise UserError(f"--show {tid}: no such trace in this run")
    table = Table(title=f"trace {tid}", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("tokens", justify="right")
    for c in columns:
        table.add_column(c, justify="right")
    table.add_column("text", overflow="fold")
    for r in sel:
        vals = [
            f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns
        ]
        text = r["text"].replace("\n", "⏎ ")
        table.add_row(str(r["segment"]), str(r["n_tokens"]), *vals, text[:160])
    out.print(table)


@app.command()
def segment(
    traces: Traces,
    output: Output = Path("segments.parquet"),
    segments: Segments = 8,
    keywords: Keywords = None,
    merge: Merge = "pair",
    min_tokens: MinTokens = 1,
    max_tokens: MaxTokens = None,
    show: Annotated[
        str | None,
        typer.Option("--show", help="Print one trace's segments (trace id, or 'first')."),
    ] = None,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    chat_template: ChatTemplate = True,
    system_prompt: SystemPrompt = None,
    truncate: Truncate = False,
    on_error: OnError = "raise",
    max_traces: MaxTraces = None,
    shard: Shard = None,
    overwrite: Overwrite = False,
    prompt_field: PromptField = None,
    response_field: ResponseField = None,
    answer_field: AnswerField = None,
    solution_field: SolutionField = None,
    outcome_field: OutcomeField = None,
    id_field: IdField = None,
    quiet: Quiet = False,
) -> None:
    """Cut each trace's reasoning into segments (hybrid keyword-entropy) and write them."""
    from cotcredit.pipeline import SEGMENTS, run_analysis

    inputs = _inputs(
        on_error,
        max_traces,
        shard,
        prompt_field,
        response_field,
        answer_field,
        solution_field,
        outcome_field,
        id_field,
    )
    seg = _segment_options(segments, keywords, merge, min_tokens, max_tokens)
    scorer = _scorer(model, device, dtype, chat_template, system_prompt, truncate)
    summary = run_analysis(
        traces,
        scorer,
        segment_options=seg,
        outputs={SEGMENTS: output},
        inputs=inputs,
        overwrite=overwrite,
        progress=not quiet,
    )
    _report(summary, quiet)
    if show:
        _show(
            _shown(summary, SEGMENTS, show),
            None if show == "first" else show,
            ["boundary_entropy", "mean_entropy"],
        )


@app.command()
def redistribute(
    traces: Traces,
    output: Output = Path("rredcot.parquet"),
    value: Annotated[
        str,
        typer.Option(
            help="rhat: R̂ alone; vhat: v̂ alone; both: R̂ + v̂ (v̂ needs a reference solution)."
        ),
    ] = "both",
    space: Annotated[
        str,
        typer.Option(
            help="prob: g_k = exp(R̂_k) + exp(v̂_k) and r_k = g_k - g_(k-1) in probability space (default: keeps v̂ an importance-sampling estimate); log: g_k = logsumexp(R̂_k, v̂_k), differences of log-probabilities."
        ),
    ] = "prob",
    sum_to: Annotated[
        str,
        typer.Option(
            help="return: rewards of a trace sum to its outcome ζ (the first segment also gets g_0); advantage: they sum to ζ - g_0."
        ),
    ] = "return",
    length_norm: Annotated[
        bool, typer.Option(help="Per-token (geometric-mean) normalisation of log p(U*) in v̂.")
    ] = False,
    exit_string: Annotated[
        str | None,
        typer.Option(
            help="Answer-forcing string E appended after a prefix [default: per template; '</think>' models get the close tag first]."
        ),
    ] = None,
    answer_terminator: Annotated[
        str,
        typer.Option(
            help="Multiply p(Y*) by the mass of tokens starting with this string (answer ends); '' to disable."
        ),
    ] = "}",
    connector: Annotated[
        str, typer.Option(help="String C between the prefix and the reference solution in v̂.")
    ] = "\n",
    probe_mode: Annotated[
        str,
        typer.Option(
            help="packed: all probes in packed passes on the trace's KV cache; naive: one forward per probe (for checks)."
        ),
    ] = "packed",
    segments: Segments = 8,
    keywords: Keywords = None,
    merge: Merge = "pair",
    min_tokens: MinTokens = 1,
    max_tokens: MaxTokens = None,
    segments_file: SegmentsFile = None,
    show: Annotated[
        str | None, typer.Option("--show", help="Print one trace's rewards (trace id, or 'first').")
    ] = None,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    chat_template: ChatTemplate = True,
    system_prompt: SystemPrompt = None,
    truncate: Truncate = False,
    on_error: OnError = "raise",
    max_traces: MaxTraces = None,
    shard: Shard = None,
    overwrite: Overwrite = False,
    prompt_field: PromptField = None,
    response_field: ResponseField = None,
    answer_field: AnswerField = None,
    solution_field: SolutionField = None,
    outcome_field: OutcomeField = None,
    id_field: IdField = None,
    quiet: Quiet = False,
) -> None:
    """RREDCoT: redistribute each trace's outcome over its reasoning segments.

    At every boundary k the model gives R̂_k = log p(Y* | s_k + E) and, with a reference solution
    U*, v̂_k = log p(U* | s_k + C) + log p(Y* | s_k + C + U* + E). Both are computed in log space;
    by default they are combined as probabilities, g_k = exp(R̂_k) + exp(v̂_k), and the reward of
    segment k is r_k = g_k - g_(k-1); the last segment absorbs ζ - g_K so rewards sum to ζ.
    """
    from cotcredit.forcing import ForcingOptions
    from cotcredit.methods.rredcot import RredcotOptions
    from cotcredit.pipeline import run_analysis

    inputs = _inputs(
        on_error,
        max_traces,
        shard,
        prompt_field,
        response_field,
        answer_field,
        solution_field,
        outcome_field,
        id_field,
    )
    seg = _segment_options(segments, keywords, merge, min_tokens, max_tokens)
    opts = RredcotOptions(
        value=value,
        space=space,
        sum_to=sum_to,
        length_norm=length_norm,
        connector=connector,
        probe_mode=probe_mode,
        forcing=ForcingOptions(exit_string, answer_terminator),
    ).validate()
    scorer = _scorer(model, device, dtype, chat_template, system_prompt, truncate)
    summary = run_analysis(
        traces,
        scorer,
        methods={"rredcot": opts},
        segment_options=seg,
        segments_file=segments_file,
        outputs={"rredcot": output},
        inputs=inputs,
        overwrite=overwrite,
        progress=not quiet,
    )
    _report(summary, quiet)
    if show:
        _show(
            _shown(summary, "rredcot", show),
            None if show == "first" else show,
            ["r_hat", "v_hat", "g_after", "score"],
        )


@app.command("mc-baseline")
def mc_baseline(
    traces: Traces,
    output: Output = Path("mc.parquet"),
    rollouts: Annotated[
        int, typer.Option("--rollouts", "-n", help="Completions N sampled from every boundary.")
    ] = 8,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass (1: off).")] = 1.0,
    max_new_tokens: Annotated[
        int, typer.Option(help="Tokens a rollout may generate before it counts as truncated.")
    ] = 1024,
    seed: Annotated[int, typer.Option(help="Seed: same seed, backend and device, same rollouts.")] = 0,
    batch_size: Annotated[
        int | None,
        typer.Option(help="Rollouts per generate call [default: automatic; halved on out-of-memory]."),
    ] = None,
    backend: Annotated[
        str, typer.Option(help="hf: transformers generate (CPU/GPU); vllm: vLLM (when installed).")
    ] = "hf",
    truncated: Annotated[
        str,
        typer.Option(
            help="Rollouts cut off by --max-new-tokens: wrong (count as wrong) or drop (leave out of V)."
        ),
    ] = "wrong",
    max_boundaries: Annotated[
        int | None,
        typer.Option(
            help="Score at most this many boundaries per trace (evenly spaced, incl. the prompt and the full reasoning); V is interpolated in between."
        ),
    ] = None,
    save_rollouts: Annotated[
        Path | None,
        typer.Option(
            help="Parquet file receiving every rollout (trace, boundary, sample, text, answer, correct, truncated)."
        ),
    ] = None,
    segments: Segments = 8,
    keywords: Keywords = None,
    merge: Merge = "pair",
    min_tokens: MinTokens = 1,
    max_tokens: MaxTokens = None,
    segments_file: SegmentsFile = None,
    show: Annotated[
        str | None, typer.Option("--show", help="Print one trace's values (trace id, or 'first').")
    ] = None,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    chat_template: ChatTemplate = True,
    system_prompt: SystemPrompt = None,
    truncate: Truncate = False,
    on_error: OnError = "raise",
    max_traces: MaxTraces = None,
    shard: Shard = None,
    overwrite: Overwrite = False,
    prompt_field: PromptField = None,
    response_field: ResponseField = None,
    answer_field: AnswerField = None,
    solution_field: SolutionField = None,
    outcome_field: OutcomeField = None,
    id_field: IdField = None,
    quiet: Quiet = False,
) -> None:
    """Monte Carlo values: from every segment boundary sample N completions and grade them.

    V_k = fraction of the N rollouts from state s_k (prompt + segments 1..k) whose final answer
    matches the reference (math-verify), stderr = sqrt(V_k (1 - V_k) / N); the credit of segment
    k is V_k - V_(k-1), so a trace's credits sum to V_K - V_0.
    """
    from cotcredit.methods.mc import McOptions
    from cotcredit.pipeline import run_analysis

    inputs = _inputs(
        on_error,
        max_traces,
        shard,
        prompt_field,
        response_field,
        answer_field,
        solution_field,
        outcome_field,
        id_field,
    )
    seg = _segment_options(segments, keywords, merge, min_tokens, max_tokens)
    opts = McOptions(
        rollouts=rollouts,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        backend=backend,
        truncated=truncated,
        max_boundaries=max_boundaries,
        save_rollouts=str(save_rollouts) if save_rollouts else None,
    ).validate()
    scorer = _scorer(model, device, dtype, chat_template, system_prompt, truncate)
    if overwrite and save_rollouts is not None and save_rollouts.exists():
        from cotcredit.io import remove_table

        remove_table(save_rollouts)  # a table folder (or a file of cotcredit 0.1)
    summary = run_analysis(
        traces,
        scorer,
        methods={"mc": opts},
        segment_options=seg,
        segments_file=segments_file,
        outputs={"mc": output},
        inputs=inputs,
        overwrite=overwrite,
        progress=not quiet,
    )
    _report(summary, quiet)
    # This run's rows, read back column-wise from the output (a big run holds many).
    rows = summary.read_table("mc", columns=[
        "trace_id", "segment", "trace_rollouts", "trace_truncated", "value_before", "value_after"
    ]).to_pandas() if summary.main and not quiet else None
    if rows is not None and len(rows):
        first = rows.drop_duplicates("trace_id", keep="first")
        last = rows.drop_duplicates("trace_id", keep="last")
        n = int(first["trace_rollouts"].sum())
        cut = int(first["trace_truncated"].sum())
        table = Table(title="mc-baseline")
        for c in ("traces", "rollouts", "truncated", "policy", "mean V_0", "mean V_K"):
            table.add_column(c, justify="right")
        v0 = rows.loc[rows["segment"] == 0, "value_before"].to_numpy()
        v_k = last["value_after"].to_numpy()
        table.add_row(
            str(len(first)),
            str(n),
            f"{cut} ({cut / n:.1%})" if n else "0",
            truncated,
            f"{v0.mean():.3f}",
            f"{v_k.mean():.3f}",
        )
        err.print(table)
    if show:
        _show(
            _shown(summary, "mc", show),
            None if show == "first" else show,
            ["value_before", "value_after", "stderr", "n_correct", "n_truncated", "score"],
        )


@app.command()
def generate(
    problems: Annotated[
        Path,
        typer.Argument(help="JSONL file of problems: prompt and reference answer (+ solution, id)."),
    ],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="JSONL file of traces to append to (resumed if it exists)."),
    ] = Path("traces.jsonl"),
    samples: Annotated[
        int, typer.Option("--samples", "-n", help="Responses sampled per problem.")
    ] = 4,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass (1: off).")] = 1.0,
    max_new_tokens: Annotated[
        int, typer.Option(help="Tokens per response; longer ones are cut (finish_reason length).")
    ] = 1024,
    seed: Annotated[int, typer.Option(help="Seed: same seed, backend and device, same traces.")] = 0,
    batch_size: Annotated[
        int | None,
        typer.Option(help="Responses per generate call [default: automatic; halved on out-of-memory]."),
    ] = None,
    backend: Annotated[
        str, typer.Option(help="hf: transformers generate (CPU/GPU); vllm: vLLM (when installed).")
    ] = "hf",
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    chat_template: ChatTemplate = True,
    system_prompt: SystemPrompt = None,
    on_error: Annotated[
        str, typer.Option(help="raise: stop at the first bad problem; skip: skip it, report it, go on.")
    ] = "raise",
    max_problems: Annotated[int | None, typer.Option(help="Sample at most this many problems.")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing output instead of resuming it.")
    ] = False,
    prompt_field: PromptField = None,
    answer_field: AnswerField = None,
    solution_field: SolutionField = None,
    id_field: Annotated[str | None, typer.Option(help="JSON key of the problem id.")] = None,
    quiet: Quiet = False,
) -> None:
    """Sample graded reasoning traces from a problem set, as input for the other commands.

    Each response is graded against the reference answer (math-verify) and appended as a trace
    line (id '<problem id>-s<j>', prompt, response, answer, solution, correct, sampling
    metadata). A rerun skips problems already sampled.
    """
    from cotcredit.generate import GenerateOptions, generate_traces

    inputs = _inputs(
        on_error, None, None, prompt_field, None, answer_field, solution_field, None, id_field
    )
    opts = GenerateOptions(
        samples=samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        backend=backend,
    ).validate()
    scorer = _scorer(model, device, dtype, chat_template, system_prompt, False)
    summary = generate_traces(
        problems,
        output,
        model=scorer,
        options=opts,
        fields=inputs.fields,
        on_error=on_error,
        max_problems=max_problems,
        overwrite=overwrite,
        progress=not quiet,
    )
    if summary.errors:
        err.print(f"skipped {len(summary.errors)} problem(s):")
        for e in summary.errors[:20]:
            err.print(f"  {e}", markup=False, highlight=False)
    if summary.no_reasoning:
        err.print(
            f"note: {summary.no_reasoning} response(s) are empty or only state an answer; the "
            "analysis commands reject them (use --on-error skip there)",
            highlight=False,
        )
    if quiet:
        return
    table = Table(title=f"generate -> {output}")
    for c in ("problems", "sampled now", "resumed", "samples", "accuracy", "truncated", "seconds"):
        table.add_column(c, justify="right")
    table.add_row(
        str(summary.problems),
        str(summary.sampled),
        str(summary.resumed),
        str(summary.samples),
        f"{summary.accuracy:.1%} ({summary.correct})" if summary.samples else "-",
        f"{summary.truncated} ({summary.truncated / summary.samples:.1%})" if summary.samples else "0",
        f"{summary.seconds:.1f}",
    )
    err.print(table)


@app.command()
def attribute(
    traces: Traces,
    output: Output = Path("attr.parquet"),
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="Comma-separated: loo (f(all) - f(all but k)), shapley (Shapley values), gradient (captum on input embeddings). All write into one file.",
        ),
    ] = "loo,shapley",
    shapley_backend: Annotated[
        str,
        typer.Option(
            help="shap: shap's Exact/Permutation explainers; captum: ShapleyValues/ShapleyValueSampling."
        ),
    ] = "shap",
    samples: Annotated[
        int,
        typer.Option(help="Shapley: orderings of the segments sampled when K > --exact-max."),
    ] = 32,
    exact_max: Annotated[
        int,
        typer.Option(
            help="Shapley: exact (all 2^K coalitions) when there are at most this many segments (captum: at most 8)."
        ),
    ] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the sampled Shapley orderings.")] = 0,
    gradient: Annotated[
        str,
        typer.Option(
            "--gradient",
            help="Comma-separated gradient kinds: ig (integrated gradients), saliency, ixg (input x gradient); rows labelled gradient-<kind>.",
        ),
    ] = "ig",
    steps: Annotated[int, typer.Option(help="Integrated-gradients steps.")] = 32,
    ig_baseline: Annotated[
        str, typer.Option(help="Integrated-gradients baseline embedding: zero | pad (pad token).")
    ] = "zero",
    ig_batch_tokens: Annotated[
        int,
        typer.Option(
            help="Tokens per internal batch of integrated-gradient steps (bounds memory; at least one sequence)."
        ),
    ] = 4096,
    baseline_text: Annotated[
        str | None,
        typer.Option(
            help="Replace an absent segment by this text's tokens instead of deleting it (loo, shapley)."
        ),
    ] = None,
    exit_string: Annotated[
        str | None,
        typer.Option(
            help="Answer-forcing string E after the reasoning [default: per template; '</think>' models get the close tag first]."
        ),
    ] = None,
    answer_terminator: Annotated[
        str,
        typer.Option(
            help="Multiply p(Y*) by the mass of tokens starting with this string (answer ends); '' to disable."
        ),
    ] = "}",
    probe_mode: Annotated[
        str,
        typer.Option(
            help="packed: perturbed traces as continuations on the trace's KV cache, many per pass; naive: full passes (for checks)."
        ),
    ] = "packed",
    segments: Segments = 8,
    keywords: Keywords = None,
    merge: Merge = "pair",
    min_tokens: MinTokens = 1,
    max_tokens: MaxTokens = None,
    segments_file: SegmentsFile = None,
    show: Annotated[
        str | None, typer.Option("--show", help="Print one trace's scores (trace id, or 'first').")
    ] = None,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    chat_template: ChatTemplate = True,
    system_prompt: SystemPrompt = None,
    truncate: Truncate = False,
    on_error: OnError = "raise",
    max_traces: MaxTraces = None,
    shard: Shard = None,
    overwrite: Overwrite = False,
    prompt_field: PromptField = None,
    response_field: ResponseField = None,
    answer_field: AnswerField = None,
    solution_field: SolutionField = None,
    outcome_field: OutcomeField = None,
    id_field: IdField = None,
    quiet: Quiet = False,
) -> None:
    """Attribute f = log p(Y* | prompt + reasoning + E) to the reasoning segments.

    A segment is absent by deletion of its tokens (or replacement by --baseline-text). loo:
    f(all) - f(all but k), positive = the segment helped the answer. shapley: Shapley values
    of the segments (they sum to f(all) - f(none)). gradient: captum attributions on the input
    embeddings, summed per segment (signed), with their L2 norm and the IG convergence delta.
    """
    from cotcredit.attribution import TargetOptions
    from cotcredit.forcing import ForcingOptions
    from cotcredit.methods.gradient import GradientOptions
    from cotcredit.methods.loo import LooOptions
    from cotcredit.methods.shapley import ShapleyOptions
    from cotcredit.pipeline import run_analysis

    known = ("loo", "shapley", "gradient")
    names = list(dict.fromkeys(m.strip() for m in method.split(",") if m.strip()))
    bad = [m for m in names if m not in known]
    if bad or not names:
        raise UserError(
            f"--method: unknown method '{','.join(bad)}' (use a comma-separated list of {', '.join(known)})"
        )
    inputs = _inputs(
        on_error,
        max_traces,
        shard,
        prompt_field,
        response_field,
        answer_field,
        solution_field,
        outcome_field,
        id_field,
    )
    seg = _segment_options(segments, keywords, merge, min_tokens, max_tokens)
    target = TargetOptions(
        forcing=ForcingOptions(exit_string, answer_terminator),
        baseline_text=baseline_text,
        probe_mode=probe_mode,
    ).validate()
    kinds = tuple(dict.fromkeys(k.strip() for k in gradient.split(",") if k.strip()))
    all_opts = {
        "loo": LooOptions(target=target),
        "shapley": ShapleyOptions(
            target=target, backend=shapley_backend, samples=samples, exact_max=exact_max, seed=seed
        ),
        "gradient": GradientOptions(
            target=TargetOptions(forcing=target.forcing),
            kinds=kinds,
            steps=steps,
            ig_baseline=ig_baseline,
            batch_tokens=ig_batch_tokens,
        ),
    }
    methods = {name: all_opts[name].validate() for name in names}
    scorer = _scorer(model, device, dtype, chat_template, system_prompt, truncate)
    summary = run_analysis(
        traces,
        scorer,
        methods=methods,
        segment_options=seg,
        segments_file=segments_file,
        outputs={name: output for name in methods},
        inputs=inputs,
        overwrite=overwrite,
        progress=not quiet,
    )
    _report(summary, quiet)
    if show:
        merged: dict[tuple, dict] = {}
        labels = [lab for lab in summary.paths if lab != "segments"]
        for lab in labels:
            for r in _shown(summary, lab, show):
                row = merged.setdefault((r["trace_id"], r["segment"]), dict(r))
                row[lab] = r["score"]
        _show(list(merged.values()), None if show == "first" else show, labels)


@app.command()
def compare(
    inputs: Annotated[list[Path] | None, typer.Argument(help="A JSONL file of traces (runs the methods), or with --scores: Parquet score files. None: use the score tables in --dir.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Report folder [default: report, or DIR/report without inputs].")] = None,
    methods: Annotated[str, typer.Option("--methods", help="Comma-separated methods: rredcot, mc, loo, shapley, gradient (or gradient-ig, ...).")] = "rredcot,mc,loo",
    scores: Annotated[bool, typer.Option("--scores", help="Correlate the Parquet score files given as inputs instead of running methods.")] = False,
    dir_: Annotated[Path | None, typer.Option("--dir", help="Without inputs: folder whose score tables (rredcot.parquet, mc.parquet, attr.parquet, ...) are compared [default: .].")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML/TOML/JSON file of method options: {mc: {rollouts: 8}, rredcot: {value: rhat}}.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="METHOD.OPTION=VALUE, repeatable (e.g. --set mc.rollouts=4).")] = None,
    rollouts: Annotated[int | None, typer.Option(help="mc: completions per boundary.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="mc: maximum tokens per completion.")] = None,
    shapley_samples: Annotated[int | None, typer.Option(help="shapley: orderings sampled when K is large.")] = None,
    reference: Annotated[str, typer.Option(help="Method the position and top-1 analyses compare against.")] = "mc",
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples of traces for the CIs.")] = 2000,
    min_segments: Annotated[int, typer.Option(help="Traces with fewer segments are counted, not correlated.")] = 3,
    segments: Segments = 8, keywords: Keywords = None, merge: Merge = "pair",
    min_tokens: MinTokens = 1, max_tokens: MaxTokens = None, segments_file: SegmentsFile = None,
    model: Model = None, device: Device = "auto", dtype: Dtype = "auto",
    chat_template: ChatTemplate = True, system_prompt: SystemPrompt = None, truncate: Truncate = False,
    on_error: OnError = "raise", max_traces: MaxTraces = None, shard: Shard = None, overwrite: Overwrite = False,
    prompt_field: PromptField = None, response_field: ResponseField = None, answer_field: AnswerField = None,
    solution_field: SolutionField = None, outcome_field: OutcomeField = None, id_field: IdField = None,
    quiet: Quiet = False,
) -> None:
    """Correlate several methods' scores on one segmentation and write a report.

    Without inputs, compares the score tables the per-method commands wrote in the current
    folder (or --dir); with a traces file, runs the methods first; with --scores, reads the
    named score files. Writes correlations.parquet, report.md, a self-contained report.html,
    report.tex (booktabs tables) and figures (PNG and PDF) into the output folder, and prints a
    summary table.
    """
    from cotcredit.compare import (
        ScoreTablesNotFound,
        compare_folder,
        compare_scores,
        method_options,
        run_methods,
    )

    stats = dict(reference=reference, n_boot=bootstrap, min_segments=min_segments)
    if not inputs:
        if scores:
            raise UserError("compare --scores: name the score files, or leave out --scores to use the tables in --dir")
        try:
            result = compare_folder(dir_ or Path("."), methods, output, **stats)
        except ScoreTablesNotFound as e:
            for line in e.lines:
                err.print(f"error: {line}", markup=False, highlight=False)
            raise typer.Exit(2) from None
        if not quiet:
            for label, path in result.sources.items():
                err.print(f"{label}: {path}", markup=False, highlight=False)
    elif dir_ is not None:
        raise UserError("compare --dir: finds score tables when no inputs are given; drop --dir or the inputs")
    elif scores:
        result = compare_scores(inputs, output or Path("report"), **stats)
    else:
        if len(inputs) != 1:
            raise UserError("compare: give one traces file, or --scores with Parquet score files")
        opts = method_options(methods, config, set_, rollouts=rollouts, max_new_tokens=max_new_tokens,
                              shapley_samples=shapley_samples)
        inp = _inputs(on_error, max_traces, shard, prompt_field, response_field, answer_field,
                      solution_field, outcome_field, id_field)
        seg = _segment_options(segments, keywords, merge, min_tokens, max_tokens)
        scorer = _scorer(model, device, dtype, chat_template, system_prompt, truncate)
        summary, score_files = run_methods(inputs[0], scorer, opts, output or Path("report"), segment_options=seg,
                                           segments_file=segments_file, inputs=inp,
                                           overwrite=overwrite, progress=not quiet)
        _report(summary, quiet)
        if not summary.main:  # launched: the main process writes the report
            return
        result = compare_scores(score_files, output or Path("report"), **stats)
    if not quiet:
        from cotcredit.report import cost_table, summary_table

        out.print(summary_table(result.correlations))
        costs = result.costs()
        if costs is not None:
            out.print(cost_table(costs))
        err.print(f"report: {result.files.html}", highlight=False)


@app.command()
def export(
    scores: Annotated[Path, typer.Argument(help="Parquet file of segment scores.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="JSON Lines file to write.")] = Path("prm.jsonl"),
    traces: Annotated[Path | None, typer.Option(help="The traces JSONL the scores came from (for the prompts).")] = None,
    format: Annotated[str, typer.Option("--format", help="trl-stepwise: TRL stepwise-supervision (prompt, completions, labels); jsonl: nested records.")] = "trl-stepwise",
    threshold: Annotated[float, typer.Option(help="trl-stepwise: label = score > threshold.")] = 0.0,
    method: Annotated[str | None, typer.Option(help="Method to export when the file holds several.")] = None,
    prompt_field: PromptField = None, response_field: ResponseField = None, answer_field: AnswerField = None,
    id_field: IdField = None,
) -> None:
    """Export one method's segment credits, e.g. as labels for a process reward model."""
    import pandas as pd

    from cotcredit.export import export_scores
    from cotcredit.report import load_scores

    if traces is None:
        raise UserError("export: pass --traces traces.jsonl (the prompts are read from it)")
    inp = _inputs("skip", None, None, prompt_field, response_field, answer_field, None, None, id_field)
    from cotcredit.traces import read_traces

    prompts = {t.id: t.prompt for t in read_traces(traces, inp.fields, on_error="skip").traces}
    table: pd.DataFrame = load_scores([scores])
    res = export_scores(table, prompts, output, format=format, threshold=threshold, method=method)
    err.print(f"{res.n_written} trace(s) of {res.method} -> {res.path}"
              + (f" ({len(res.skipped_nan)} left out: NaN scores)" if res.skipped_nan else ""),
              highlight=False)


@app.command("merge")
def merge_cmd(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Parquet files written by the shards of one run (--shard i/n)."),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = False,
    quiet: Quiet = False,
) -> None:
    """Join shard outputs of one run into one table.

    Every input must hold the same run (one run_id: same model, segmentation, methods and
    options) and no trace may be in two inputs; anything else is refused. The run metadata is
    kept, with the list of merged files. Rows keep their values; only the file changes.
    """
    from cotcredit.merge import merge_tables

    summary = merge_tables(inputs, output, overwrite=overwrite)
    for note in summary.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if not quiet:
        err.print(
            f"merged {len(summary.inputs)} file(s): {summary.traces} trace(s), "
            f"{summary.rows} row(s) -> {summary.output}",
            markup=False,
            highlight=False,
        )


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="YAML config of the run (see examples/train/).")],
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the last checkpoint in output_dir.")
    ] = False,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Override grpo.max_steps of the config.")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Delete checkpoints and logs already in output_dir, start over.")
    ] = False,
) -> None:
    """GRPO on a problem set, with plain (advantage: grpo) or RREDCoT token advantages.

    Writes checkpoints, metrics.jsonl, eval.json (accuracy before/after on eval_file),
    reward_curve.png and config.yaml to output_dir. Several GPUs:
    `accelerate launch -m cotcredit train config.yaml`.
    """
    from cotcredit.train.run import train as run_training

    result = run_training(config, resume=resume, max_steps=max_steps, overwrite=overwrite)
    evaluation = ""
    if result.eval and result.eval.get("after"):
        before, after = result.eval["before"]["accuracy"], result.eval["after"]["accuracy"]
        evaluation = f", eval accuracy {before:.3f} -> {after:.3f}"
    err.print(
        f"trained to step {result.global_step} in {result.seconds:.0f} s{evaluation}; "
        f"outputs in {result.output_dir}",
        markup=False,
        highlight=False,
    )


@app.command()
def version() -> None:
    """Print the cotcredit version."""
    from cotcredit import __version__

    out.print(__version__)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user errors into one line and exit status 2."""
    interrupted = "interrupted: finished traces are saved; rerun the same command to resume"
    try:
        rc = app(args=argv, standalone_mode=False)
    except UserError as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print(interrupted)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # usage errors: typer vendors its own click (typer._click)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(130)
        raise
    # Not standalone, typer turns Ctrl-C into a *returned* 130.
    if rc == 130:
        err.print(interrupted)
    if isinstance(rc, int) and rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()
