"""The vLLM backend of sampling: `LLM(model=<the scorer's model folder>,
enable_prefix_caching=True)`, prompts given as token ids, `SamplingParams(n=..., seed=...)` per
prompt. vLLM is imported when a generator is made (the vllm extra, on a CUDA machine)."""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from cotcredit.distributed import launched
from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.lm.generation import (
    Completion,
    GenerationStats,
    decode_continuation,
    default_keys,
    row_seed,
)

_VLLM: dict[str, object] = {}

#: Said when a launcher starts several processes: vLLM's one-GPU engine takes the device index of
#: its own config (GPU 0), not the launcher's local rank, so every process would share GPU 0.
SHARED_GPU = (
    "--backend vllm under a launcher: every process starts its own vLLM engine, on the first GPU "
    "it sees (all on GPU 0); run one job per GPU instead (CUDA_VISIBLE_DEVICES=i ... --shard i/n, "
    "docs/guides/scaling-out.md), or pass vLLM's own --vllm-arg distributed_executor_backend=..."
)


class VLLMGenerator:
    """vLLM with prefix caching, on the scorer's model folder."""

    backend = "vllm"

    def __init__(self, model_path: str, tokenizer, dtype: torch.dtype, stop_ids: list[int],
                 engine_args: dict | None = None):
        import torch

        require("--backend vllm (on a CUDA machine; else --backend hf)", "vllm")
        import vllm
        self.vllm, self.tokenizer, self.stop_ids = vllm, tokenizer, stop_ids
        self.stats = GenerationStats()
        if model_path not in _VLLM:
            if launched() and "distributed_executor_backend" not in (engine_args or {}):
                warnings.warn(SHARED_GPU, stacklevel=2)
            util = 0.9
            if torch.cuda.is_available():  # leave room for the scorer's copy of the model
                free, total = torch.cuda.mem_get_info()
                util = max(0.05, min(0.9, 0.9 * free / total))
            # The user's engine arguments (tensor/data parallel, memory...) override ours.
            kwargs = {"model": model_path, "tokenizer": model_path, "enable_prefix_caching": True,
                      "dtype": str(dtype).replace("torch.", ""), "gpu_memory_utilization": util,
                      "seed": 0, **(engine_args or {})}
            try:
                _VLLM[model_path] = vllm.LLM(**kwargs)
            except TypeError as e:  # an unknown engine argument
                raise UserError(f"--vllm-arg: vLLM refused the engine arguments ({e})") from None
        self.llm = _VLLM[model_path]

    def generate(self, prompts, options, keys=None, progress=None):
        """`options.n` completions per prompt in one vLLM call (see `Generator.generate`)."""
        options.validate()
        if options.first_sample:  # vLLM draws a prompt's n samples from one stream
            raise ValueError("the vllm backend cannot start at a later sample (first_sample)")
        if options.stop_lines:  # the hf backend counts line-break tokens as it decodes
            raise ValueError("the vllm backend cannot stop after a number of lines (stop_lines)")
        prompts = [list(p) for p in prompts]
        keys = list(keys) if keys is not None else default_keys(prompts)
        greedy = options.temperature == 0
        params = [
            self.vllm.SamplingParams(
                n=1 if greedy else options.n, temperature=options.temperature, top_p=options.top_p,
                max_tokens=options.max_new_tokens, seed=row_seed(options.seed, k, 0) % (1 << 63),
                stop_token_ids=self.stop_ids, skip_special_tokens=True)
            for k in keys
        ]
        t0 = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        final = []
        for p, o in zip(prompts, outs, strict=True):
            cs = []
            for c in o.outputs:
                toks = [t for t in c.token_ids]
                if toks and toks[-1] in self.stop_ids:
                    toks = toks[:-1]
                reason = "length" if c.finish_reason == "length" else "stop"
                cs.append(Completion(toks, decode_continuation(self.tokenizer, p, toks), reason))
            if greedy:
                cs = [Completion(list(cs[0].token_ids), cs[0].text, cs[0].finish_reason)
                      for _ in range(options.n)]
            final.append(cs)
        self.stats.seconds += time.perf_counter() - t0
        self.stats.completions += sum(len(cs) for cs in final)
        self.stats.tokens += sum(len(c.token_ids) for cs in final for c in cs)
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self.stats.batches += 1
        if progress:
            progress(sum(len(cs) for cs in final))
        return final
