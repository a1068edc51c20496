"""Load and save Hugging Face causal LMs and tokenizers: local directories or hub ids.

    model = load_model("runs/tiny", device="auto", dtype="auto")   # model, checkpoint or run dir
    tokenizer = load_tokenizer("runs/tiny")
    save_model(model, "out/step_10", tokenizer)   # AutoModelForCausalLM.from_pretrained reads it

``load_from_config(cfg.model)`` does both from the ``model:`` config section.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlxf.errors import UserInputError
from rlxf.models.kernels import LinearKernels, use_fast_linears
from rlxf.models.paths import ADAPTER_CONFIG, TOKENIZER_FILES, ModelPathError, resolve_model_dir

log = logging.getLogger("rlxf")

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from rlxf.config.model import LoraConfig, ModelConfig


class ModelLoadError(UserInputError):
    """A model or tokenizer that cannot be loaded; the message says which path and what to do."""


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` -> CUDA when available, else CPU."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device is {device!r} but CUDA is not available here; use `auto` or `cpu`")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """``auto`` -> bfloat16 on a CUDA device that supports it, else float32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device is not None and device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; valid: auto, float32, bfloat16, float16") from None


def slow_cpu_dtype(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why ``dtype`` would be slow on this CPU, or None. Without oneDNN's half-precision kernels
    (AVX512-FP16 / AMX for float16, AVX512-BF16 / AMX for bfloat16) torch computes those dtypes
    by converting to float32 and back, several times slower than float32 itself."""
    if device.type != "cpu" or dtype not in (torch.float16, torch.bfloat16) or cpu_has_half_kernels(dtype):
        return None
    name = str(dtype).removeprefix("torch.")
    return (f"model.dtype={name} on a CPU without {name} matmul kernels: torch emulates {name} through float32, "
            f"several times slower than float32 (and float16 training has no loss scaling here). "
            f"Set model.dtype=float32 (or auto) on this machine.")


def cpu_has_half_kernels(dtype: torch.dtype) -> bool:
    """Whether oneDNN has fast ``dtype`` (float16 / bfloat16) kernels on this CPU; True when torch
    cannot tell (no warning is better than a wrong one)."""
    check = {torch.float16: "_is_mkldnn_fp16_supported", torch.bfloat16: "_is_mkldnn_bf16_supported"}[dtype]
    try:
        return bool(getattr(torch.ops.mkldnn, check)())
    except (AttributeError, RuntimeError):
        return True


def warn_slow_cpu_dtype(device: torch.device, dtype: torch.dtype) -> None:
    """Log :func:`slow_cpu_dtype`'s reason, once per load: a run that is slow for this reason says so."""
    reason = slow_cpu_dtype(device, dtype)
    if reason:
        log.warning(reason)


def check_source(path: str | Path, what: str, *, local_first: bool = False, adapters: bool = False,
                 tokenizer: bool = False, revision: str | None = None) -> str:
    """A local directory, or something that looks like a hub id; otherwise a helpful error.

    ``tokenizer``: a local directory holding tokenizer files (and no model) is returned as it is.

    ``adapters``: a local PEFT LoRA adapter directory is returned as it is (``load_model`` and
    ``load_tokenizer`` read it through its base model); otherwise it is refused with how to merge it.

    ``a/b`` where ``a`` is a local directory but ``a/b`` does not exist is a mistyped local path
    (``models/nan0`` for ``models/nano``), refused at once rather than after a minute of hub
    retries, unless the hub model ``a/b`` is already in the Hugging Face cache. ``local_first``:
    refused even then (a command line's ``runs/NAME`` is never a hub id).

    A hub id is checked against the hub once (``_hub_source``): with the hub out of reach it is
    read from the local cache (``revision``'s snapshot), or refused at once when it is not there.
    A ``revision`` (model.revision) with a local model directory is refused: from_pretrained would
    ignore it and load whatever the directory holds, where the user asked for a pinned version."""
    text = str(path)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelLoadError(f"{what} {text} is a file; give the directory that holds config.json")
        if adapters and is_adapter_dir(local):
            return str(local)  # a revision is its base model's, checked when that is loaded
        source = _local_source(local, what, tokenizer)
        if revision is not None:
            raise ModelLoadError(
                f"{what} {text} is a local directory, so model.revision={revision!r} cannot apply to it (a revision "
                f"is a branch, tag or commit of a Hugging Face hub repository; the directory's files would be loaded "
                f"as they are). Remove model.revision to use the directory, or set model.path to the hub id (org/name) "
                f"to load that revision.")
        return source
    # runs/NAME is where rlxf writes its runs (run.output_dir's default): a run not made yet, not
    # a hub id to spend half a minute of retries on
    looks_local = text.startswith((".", "/", "~", "runs/")) or text.count("/") > 1 or text.endswith("/")
    if looks_local:
        raise ModelLoadError(f"{what} {text} does not exist. {missing_model_hint(local, what)}")
    if text.count("/") == 1 and local.parent.is_dir() and (local_first or not _in_hub_cache(text)):
        # `models/nan0` with a local `models/`: almost surely a mistyped local path. Tried as a hub
        # id it would spend about a minute on retries before failing, so it is refused now
        raise ModelLoadError(f"{what} {text} does not exist. {_no_local_subdir(local, text, local_first, what)}")
    return _hub_source(text, what, revision)


def _in_hub_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether the Hugging Face cache holds ``repo_id`` (no network: the cache directory only)."""
    return _hub_cache_dir(repo_id, revision) is not None


def _hub_cache_dir(repo_id: str, revision: str | None = None) -> str | None:
    """The cached snapshot directory of ``repo_id`` at ``revision`` (default main), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for name in ("config.json", "tokenizer_config.json"):
        try:
            found = try_to_load_from_cache(repo_id, name, revision=revision)
        except ValueError:  # not a valid repo id (HFValidationError)
            return None
        if isinstance(found, str):
            return str(Path(found).parent)
    return None


def _hub_source(repo_id: str, what: str, revision: str | None) -> str:
    """What ``from_pretrained`` is given for the hub id ``repo_id``.

    huggingface_hub retries an unreachable hub for about 25 s per file before it falls back to
    its cache or fails (a minute for a model and its tokenizer), so the hub is asked once, with
    no retries: out of reach, a cached snapshot is read as a local directory, and a model that
    is not cached is refused now, saying so. HF_HUB_OFFLINE=1 asks nothing (transformers then
    reads the cache at once)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return repo_id
    if constants.HF_HUB_OFFLINE:
        return repo_id
    unreachable = hub_unreachable()
    if unreachable is None:
        return repo_id
    cached = _hub_cache_dir(repo_id, revision)
    if cached is not None:
        log.warning("the Hugging Face hub (%s) cannot be reached (%s): %s %s is read from the local cache, %s",
                    constants.ENDPOINT, unreachable, what, repo_id, cached)
        return cached
    at = f" at revision {revision!r}" if revision else ""
    raise ModelLoadError(
        f"{what} {repo_id}: no such local directory, so it is a Hugging Face hub id, but the hub "
        f"({constants.ENDPOINT}) cannot be reached from this machine ({unreachable}) and {repo_id}{at} is not in "
        f"the local cache ({constants.HF_HUB_CACHE}). Download it where the hub is reachable (`hf download "
        f"{repo_id}`) and copy that cache here (or set HF_HUB_CACHE to it), or give a local model directory "
        f"(relative to the working directory, {Path.cwd()}).{_near_local(repo_id)}")


def _near_local(text: str) -> str:
    """`` Did you mean models/nano?`` when the first part of ``text`` (``model/nano``, ``nan0``) is a
    mistyped name of a directory in the working directory and the rest is there; else ""."""
    first, _, rest = text.partition("/")
    try:
        held = [p.name for p in Path.cwd().iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return ""
    guesses = [Path(name, rest) for name in difflib.get_close_matches(first, held, n=3)]
    found = next((g for g in guesses if g.is_dir()), None)
    return f" Did you mean {found}?" if found else ""


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached from here (one request, no retries), or None when it answers.

    Through huggingface_hub's own HTTP client, so its proxies and certificates apply; any HTTP
    answer, an error status included, means reachable (the download then says what is wrong)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except Exception as e:  # noqa: BLE001 - only a failure to connect is an answer; see below
        network = isinstance(e, OSError) or any(c.__name__ == "TransportError" for c in type(e).__mro__)
        return f"{type(e).__name__}: {e}" if network else None  # httpx's errors are not OSErrors
    return None


def _no_local_subdir(local: Path, text: str, local_first: bool, what: str = "model.path") -> str:
    """Why ``a/b`` is refused when ``a`` is a local directory: what ``a`` holds, the near name,
    and how to mean the hub id of that name."""
    parent = local.parent
    try:
        held = sorted(p.name for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:  # not readable: the message still names the path
        held = []
    close = difflib.get_close_matches(local.name, held, n=1)
    hint = f" Did you mean {parent / close[0]}?" if close else f" {missing_model_hint(local, what)}"
    shown = f"it holds {', '.join(held[:8])}{', ...' if len(held) > 8 else ''}" if held else "it is empty"
    hub = "" if local_first else (
        f" A name of the form org/name is tried as a Hugging Face hub id only when no local directory "
        f"{parent}/ exists or the hub model is already in the local cache: to use the hub model {text!r}, "
        f"download it first (`hf download {text}`); it is then read from the cache.")
    return f"There is no directory {local.name!r} in the local directory {parent}/ ({shown}).{hint}{hub}"


def _local_source(local: Path, what: str, tokenizer: bool = False) -> str:
    """A model, checkpoint or run directory -> the model directory it stands for (one rule,
    ``rlxf.models.paths``); for a ``tokenizer``, a tokenizer-only directory is used as it is."""
    if tokenizer and any((local / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return str(local)
    try:
        return str(resolve_model_dir(local).model)
    except ModelPathError as e:
        raise ModelLoadError(f"{what if what.endswith('path') else what + ' path'}: {e}") from None


def missing_model_hint(path: Path, what: str = "model.path") -> str:
    """What to do about a model directory that does not exist, given as ``what``: a config field
    (``model.path``) is set to another, a command's argument (``model``) is given another.

    The examples start from the quickstart's SFT run (``OUT/sft``, or its ``OUT/sft/model``), so
    those paths get "run the quickstart"; ``init-model`` is offered only as a smoke test, since
    its model is untrained and an exact-answer reward stays 0 on it.
    """
    field = re.fullmatch(r"[a-z_]+(?:\.[a-z_]+)+", what) is not None   # model.path, critic.model_path
    other = (lambda model: f"set {what} to {model}") if field else (lambda model: f"give {model} instead")
    if path.parts[:1] == ("runs",) and len(path.parts) == 2 and path.name != "sft":
        return (f"runs/{path.name} is where an rlxf run named {path.name!r} writes its models: run it first "
                f"(from this directory), or {other('a trained causal LM directory or hub id')}.")
    if path.name == "sft" or path.parts[-2:] == ("sft", "model"):
        out = path.parent if path.name == "sft" else path.parent.parent
        return (f"It is the SFT model that `rlxf quickstart {out}` trains (about 4 minutes on a CPU): "
                f"run that first, or {other('another trained causal LM directory or hub id')}.")
    first = other("a trained causal LM directory or a Hugging Face hub id (org/name)")
    return (f"{first[0].upper()}{first[1:]}. "
            f"(`rlxf init-model --preset tiny {path}` writes an untrained model there: enough to check "
            f"that a config runs, but its reward stays near 0.)")


def load_errors() -> tuple[type[Exception], ...]:
    """What ``from_pretrained`` raises for files it cannot use: missing or invalid ones (OSError,
    ValueError) and damaged safetensors weights (``SafetensorError``, which names no file)."""
    from safetensors import SafetensorError

    return OSError, ValueError, SafetensorError


def hub_error(source: str, err: Exception) -> ModelLoadError:
    """The error for a model or tokenizer ``from_pretrained`` could not load (``load_errors``)."""
    if "trust_remote_code" in str(err):
        # transformers names its own argument, and the generic advice below (damaged weights)
        # would send the user to copy a model that is fine
        return ModelLoadError(
            f"cannot load {source}: its config.json (auto_map) names Python code of its own that builds the "
            f"model or tokenizer, and running it is off. Set model.trust_remote_code: true if you trust that "
            f"code (it runs with your permissions), or use a model whose architecture transformers ships.")
    local = Path(source)
    if not local.is_dir():
        from huggingface_hub import constants

        fix = (f"HF_HUB_OFFLINE=1 is set, so only the local cache ({constants.HF_HUB_CACHE}) is read, and it is not "
               f"(all) there: download it where the hub is reachable (`hf download {source}`) and copy that cache here"
               if constants.HF_HUB_OFFLINE else "check the name (org/name, as on huggingface.co) and that the hub "
               "is reachable from here")
        return ModelLoadError(
            f"cannot load {source!r}: {type(err).__name__}: {str(err).rstrip('.')}. There is no local directory "
            f"{source} (a relative path is read from the working directory, {Path.cwd()}), so it was read as a "
            f"Hugging Face hub id: {fix}.{_near_local(source)}")
    damaged = unreadable_weights(local)
    what = (f"{', '.join(damaged)} in it {'is' if len(damaged) == 1 else 'are'} damaged (truncated or not "
            f"safetensors). " if damaged else "") + missing_shard_index(local)
    return ModelLoadError(
        f"cannot load the local directory {source}: {type(err).__name__}: {str(err).rstrip('.')}. {what}Check "
        f"that it holds config.json and complete model weights; a copy or save that stopped part-way leaves "
        f"truncated files: copy or save the model again.")


def check_loaded(source: str, model: torch.nn.Module, info: dict[str, Any], what: str) -> None:
    """Refuse a model whose checkpoint lacks some of its weights (``from_pretrained``'s
    ``output_loading_info``): transformers starts those at random with only a printed report, so
    a value model's directory (a trunk, no ``lm_head``) read as a causal LM would train and
    sample from a random output head."""
    missing = sorted(info.get("missing_keys") or ())
    if not missing:
        return
    arch = (getattr(model.config, "architectures", None) or ["?"])[0]
    has_head = getattr(model, "get_output_embeddings", lambda: None)() is not None
    if has_head and ((Path(source) / "rlxf_value_model.json").is_file() or not arch.endswith("ForCausalLM")):
        hint = (f"Its config.json names {arch}, a model without a language-model head (an rlxf value or reward "
                f"model saves its trunk so): give the directory of a causal LM (architectures: ...ForCausalLM), "
                f"e.g. the one the value model was initialised from.")
    else:
        hint = "A copy or save that stopped part-way leaves weights out: copy or save the model again."
    raise ModelLoadError(
        f"{what} {source} lacks {len(missing)} of the weights of {type(model).__name__} (e.g. "
        f"{', '.join(missing[:5])}); loading it would start them at random. {hint}")


def unreadable_weights(directory: Path) -> list[str]:
    """The ``*.safetensors`` files in ``directory`` whose header does not read back."""
    from safetensors import safe_open

    bad = []
    for f in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except Exception:  # noqa: BLE001 - any failure to open is what is reported
            bad.append(f.name)
    return bad


_SHARD = re.compile(r"^(?P<stem>.+)-\d+-of-\d+\.(?P<ext>safetensors|bin)$")


def missing_shard_index(directory: Path) -> str:
    """Why the sharded weights in ``directory`` cannot be found, or "": shards (``model-00001-of-00002.
    safetensors``) without the index that lists them (``model.safetensors.index.json``). Without it
    from_pretrained looks for one ``model.safetensors`` and reports no weights at all."""
    shards: dict[str, list[str]] = {}
    for f in sorted(directory.iterdir()):
        m = _SHARD.match(f.name)
        if m and f.is_file():
            shards.setdefault(f"{m['stem']}.{m['ext']}.index.json", []).append(f.name)
    for index, names in shards.items():
        if not (directory / index).is_file():
            shown = f"{names[0]}, ..." if len(names) > 1 else names[0]
            return (f"It holds {len(names)} weight shard{'s' if len(names) > 1 else ''} ({shown}) but not their "
                    f"index {index}, which says which weights each shard holds: copy it from where the shards came "
                    f"from (`hf download` and save_pretrained write it next to them). ")
    return ""


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a local PEFT adapter directory (``adapter_config.json``, no ``config.json``)."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def adapter_base(adapter: str | Path, what: str) -> str:
    """The base model named in an adapter directory's ``adapter_config.json``."""
    f = Path(adapter) / ADAPTER_CONFIG
    try:
        base = json.loads(f.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelLoadError(f"{what}: cannot read {f} ({type(e).__name__}: {e})") from None
    if not base:
        raise ModelLoadError(f"{what}: {f} names no base model (base_model_name_or_path); set it to the directory "
                             f"or hub id of the model the adapter was trained on")
    return str(base)


def merge_adapter(model: PreTrainedModel, adapter: str | Path) -> PreTrainedModel:
    """``model`` with the LoRA adapter saved in ``adapter`` merged into its weights (a plain model)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError(f"{adapter} is a LoRA adapter; loading it needs PEFT: pip install 'rlxf[peft]'") from None
    weights = [f for f in ("adapter_model.safetensors", "adapter_model.bin") if (Path(adapter) / f).is_file()]
    if not weights:   # PEFT would look for them on the hub, and fail offline with a network error
        raise ModelLoadError(f"the LoRA adapter {adapter} has {ADAPTER_CONFIG} but no weights (adapter_model."
                             f"safetensors or adapter_model.bin): copy them there, or point at the complete adapter")
    try:
        wrapped = PeftModel.from_pretrained(model, str(adapter))
        _untie_adapted_embeddings(wrapped)
        return wrapped.merge_and_unload()
    except (*load_errors(), RuntimeError, KeyError) as e:
        damaged = unreadable_weights(Path(adapter))
        if damaged:
            raise ModelLoadError(f"the LoRA adapter {adapter} cannot be read: {', '.join(damaged)} is damaged "
                                 f"(truncated or not safetensors); copy or save the adapter again") from None
        raise ModelLoadError(f"the LoRA adapter {adapter} does not fit its base model "
                             f"({type(e).__name__}: {e}); check base_model_name_or_path in its "
                             f"{ADAPTER_CONFIG}") from None


def _untie_adapted_embeddings(wrapped) -> None:
    """Give a LoRA-adapted output head (or input embedding) its own weight when the two are tied.

    The adapter changes only the layer it wraps; merged into the one shared tensor it would
    change the other as well, a different model from the one the adapter was trained as."""
    base = wrapped.get_base_model()
    inp, out = base.get_input_embeddings(), base.get_output_embeddings()
    if inp is None or out is None or inp.weight is not out.weight:
        return
    shared = inp.weight
    for _, layer in lora_layers(base):
        own = layer.get_base_layer()
        if own.weight is shared:
            own.weight = torch.nn.Parameter(shared.detach().clone(), requires_grad=shared.requires_grad)
            base.config.tie_word_embeddings = False


def load_tokenizer(
    path: str | Path,
    *,
    chat_template: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    what: str = "tokenizer",
) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained`` plus rlxf's conventions.

    ``chat_template`` (Jinja text, or a path to a file holding it) overrides the tokenizer's own.
    ``what`` names the path in errors (the config field it came from).
    A tokenizer without a pad token gets its eos token as pad (padding is always masked).
    """
    from transformers import AutoTokenizer

    source = check_source(path, what, adapters=True, tokenizer=True, revision=revision)
    if is_adapter_dir(source) and not any((Path(source) / f).is_file() for f in TOKENIZER_FILES):
        source = check_source(adapter_base(source, what), f"the base model of the LoRA adapter {source}",
                              revision=revision)
    try:
        tok = AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    except load_errors() as e:
        raise hub_error(source, e) from None
    if not tok.encode("Hello world", add_special_tokens=False):
        # transformers builds an EMPTY tokenizer from config.json's model type when a directory
        # has no tokenizer files: every prompt would encode to zero tokens, with no error
        held = [f for f in TOKENIZER_FILES if (Path(source) / f).is_file()] if Path(source).is_dir() else None
        where = (f"{source} holds no tokenizer files (none of {', '.join(TOKENIZER_FILES)})" if held == []
                 else f"the tokenizer of {source} has no vocabulary")
        raise ModelLoadError(
            f"{what}: {where}; it would encode every prompt to zero tokens. Save the model's tokenizer "
            f"next to it (tokenizer.save_pretrained(dir)) or set model.tokenizer to the directory or hub id "
            f"of the tokenizer the model was trained with.")
    if chat_template is not None:
        tok.chat_template = read_chat_template(chat_template)
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise ModelLoadError(f"tokenizer {source} has neither a pad nor an eos token; add one to it")
        tok.pad_token = tok.eos_token
    return tok


def read_chat_template(template: str) -> str:
    """Jinja template text, or the text of the file it names (``*.jinja`` / ``*.j2`` / ``*.txt``)."""
    if "{" not in template:
        p = Path(template).expanduser()
        if not p.is_file():
            raise ModelLoadError(
                f"chat_template {template!r} is neither Jinja text (it has no '{{') nor an existing file"
            )
        return p.read_text()
    return template


def load_model(
    path: str | Path,
    *,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    gradient_checkpointing: bool = False,
    lora: LoraConfig | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = "sdpa",
    linear_kernels: LinearKernels = "auto",
) -> PreTrainedModel:
    """A causal LM from a local directory or hub id, on ``device`` in ``dtype``.

    On CPU in fp32 its linear layers run on oneDNN (``linear_kernels``; see ``rlxf.models.kernels``).

    ``path`` may also be a saved PEFT LoRA adapter directory: its base model (named in
    ``adapter_config.json``) is loaded with the adapter merged in, a plain model.

    With ``lora.r > 0`` the model is wrapped in PEFT LoRA adapters (needs ``rlxf[peft]``); only
    the adapters then require grad. ``use_cache`` is turned off in the config: the trainer never
    decodes with this model, and a cache would also hide packed sequences from the mask builder.
    """
    from transformers import AutoModelForCausalLM

    source = check_source(path, "model", adapters=True, revision=revision)
    adapter = None
    if is_adapter_dir(source):
        adapter = source
        source = check_source(adapter_base(adapter, "model"), f"the base model of the LoRA adapter {adapter}",
                              revision=revision)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    warn_slow_cpu_dtype(dev, dt)
    kwargs: dict[str, Any] = {"dtype": dt, "revision": revision, "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model, info = AutoModelForCausalLM.from_pretrained(source, output_loading_info=True, **kwargs)
    except load_errors() as e:
        raise hub_error(source, e) from None
    check_loaded(source, model, info, "model")
    if adapter is not None:
        model = merge_adapter(model, adapter)
    model.to(dev)
    return _prepare(model, gradient_checkpointing=gradient_checkpointing, lora=lora, linear_kernels=linear_kernels)


def _prepare(model, *, gradient_checkpointing: bool, lora: LoraConfig | None,
             linear_kernels: LinearKernels) -> PreTrainedModel:
    model.config.use_cache = False
    use_fast_linears(model, linear_kernels)
    if gradient_checkpointing:
        enable_checkpointing(model)
    if lora is not None and lora.r > 0:
        model = apply_lora(model, lora)
    return model


def prepare_model(model: PreTrainedModel, cfg: ModelConfig, *, train: bool = True) -> PreTrainedModel:
    """An in-memory causal LM made ready as ``load_model`` makes a loaded one (kernels, and for
    training: checkpointing and LoRA per ``cfg``); it stays on its own device and dtype."""
    return _prepare(model, gradient_checkpointing=train and cfg.gradient_checkpointing,
                    lora=cfg.lora if train else None, linear_kernels=cfg.linear_kernels)


def enable_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each decoder layer's activations in the backward pass (saves memory, ~30% compute).

    Non-reentrant checkpointing works with frozen embeddings (LoRA) and with no_grad callers.
    """
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_checkpointing(model) -> bool:
    model = unwrap_model(model)
    flag = getattr(type(model), "is_activation_checkpointing", None)
    return bool(model.is_activation_checkpointing if flag is not None else model.is_gradient_checkpointing)


def apply_lora(model: PreTrainedModel, lora: LoraConfig, task_type: str = "CAUSAL_LM"):
    """Wrap ``model`` in LoRA adapters (PEFT); the base weights are frozen. ``task_type``:
    ``CAUSAL_LM`` for a language model, ``FEATURE_EXTRACTION`` for a bare trunk (a value model's)."""
    try:
        import peft
    except ImportError:
        raise ModelLoadError("model.lora.r > 0 needs PEFT: pip install 'rlxf[peft]'") from None
    check_lora_targets(model, lora.target_modules)
    cfg = peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules), task_type=task_type,
    )
    return peft.get_peft_model(model, cfg)


def _lora_layer_types() -> tuple[type[torch.nn.Module], ...]:
    """The layers a LoRA adapter attaches to here: linear layers (GPT-2 style models write them
    as transformers' ``Conv1D``) and embeddings; ``merged_state_dict`` merges each of them."""
    from transformers.pytorch_utils import Conv1D

    return torch.nn.Linear, Conv1D, torch.nn.Embedding


def check_lora_targets(model: torch.nn.Module, targets: list[str]) -> None:
    """Refuse ``model.lora.target_modules`` that PEFT would reject with a bare error, or accept
    and get wrong.

    A name matches a module whose full name is it or ends in ``.name`` (PEFT's rule, so
    ``self_attn.q_proj`` works). Refused: a name matching nothing; one matching modules that are
    not linear layers or embeddings (``mlp``, ``norm``); and one matching a tied input embedding
    or output head (``tie_word_embeddings``): the adapter would untie the two, which neither
    the rollout engines (they copy one tensor into both) nor the saved ``config.json`` can
    represent, so rollouts would sample from the untrained head.
    """
    modules = dict(model.named_modules())
    kinds = _lora_layer_types()
    layers = sorted({n.rsplit(".", 1)[-1] for n, m in modules.items() if isinstance(m, kinds[:2])})
    if not targets:
        raise ModelLoadError(f"model.lora.target_modules is empty while model.lora.r > 0: name the layers to adapt "
                             f"(linear modules this model has: {', '.join(layers)}), or set model.lora.r: 0 to "
                             f"train every weight")
    hits = {t: [n for n in modules if n and (n == t or n.endswith("." + t))] for t in targets}
    unknown = [t for t, found in hits.items() if not found]
    if unknown:
        raise ModelLoadError(
            f"model.lora.target_modules {unknown} are not modules of this model; linear modules it has: "
            f"{', '.join(layers)}")
    for t, found in hits.items():
        wrong = [n for n in found if not isinstance(modules[n], kinds)]
        if wrong:
            inner = sorted({n.rsplit(".", 1)[-1] for n, m in modules[wrong[0]].named_modules()
                            if n and isinstance(m, kinds[:2])})
            name = f"the linear layers in it: {', '.join(inner)}" if inner else f"linear layers: {', '.join(layers)}"
            raise ModelLoadError(
                f"model.lora.target_modules: {t!r} names {type(modules[wrong[0]]).__name__} modules ({wrong[0]}); "
                f"LoRA attaches only to linear layers and embeddings: name {name}")
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if inp is not None and out is not None and getattr(out, "weight", None) is inp.weight:
        tied = [t for t, found in hits.items() if any(modules[n] is inp or modules[n] is out for n in found)]
        if tied:
            raise ModelLoadError(
                f"model.lora.target_modules {tied}: this model's output head shares its weight with the input "
                f"embedding (config.json tie_word_embeddings: true), and a LoRA adapter on one of them would untie "
                f"them, which the rollout engines and the saved model cannot represent (rollouts would sample "
                f"without the adapter). Remove {', '.join(tied)} from model.lora.target_modules.")


def load_from_config(cfg: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy model and its tokenizer from the ``model:`` config section."""
    tokenizer = tokenizer_from_config(cfg)
    model = load_model(
        cfg.path, device=cfg.device, dtype=cfg.dtype, gradient_checkpointing=cfg.gradient_checkpointing,
        lora=cfg.lora, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code,
        attn_implementation=cfg.attn_implementation, linear_kernels=cfg.linear_kernels,
    )
    check_vocab(model, tokenizer, model_what=f"model.path {cfg.path}",
                tokenizer_what=f"model.tokenizer {cfg.tokenizer}" if cfg.tokenizer else None)
    return model, tokenizer


def check_vocab(model, tokenizer, *, model_what: str, tokenizer_what: str | None = None) -> None:
    """Refuse a tokenizer with more tokens than the model has embeddings: they are not made for
    each other. Such a pair runs on text that happens to use only the low token ids, then fails
    prompt by prompt (ids outside the vocabulary), and the model can never write the other tokens.
    A model with more embeddings than tokens is normal (vocabularies are padded to a round size).
    ``model_what`` names the model in the error; ``tokenizer_what`` the tokenizer, by default
    the one saved with that model."""
    embeddings = unwrap_model(model).get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if rows is not None and len(tokenizer) > rows:
        raise ModelLoadError(
            f"{tokenizer_what or f'the tokenizer of {model_what}'} has {len(tokenizer):,} tokens but {model_what} has only {rows:,} token embeddings "
            f"(config.json vocab_size): the tokenizer is not the model's. Use the tokenizer saved with the "
            f"model (leave model.tokenizer unset when the model directory holds one), or a model trained with "
            f"this tokenizer.")


def tokenizer_from_config(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of the ``model:`` section (at ``tokenizer_revision``); errors name the field
    its path came from."""
    # checked first: a missing model is the usual mistake
    check_source(cfg.path, "model.path", adapters=True, revision=cfg.revision)
    return load_tokenizer(
        cfg.tokenizer or cfg.path, chat_template=cfg.chat_template, revision=cfg.tokenizer_revision,
        trust_remote_code=cfg.trust_remote_code, what="model.tokenizer" if cfg.tokenizer else "model.path",
    )


def unwrap_model(model) -> PreTrainedModel:
    """The transformers model inside a PEFT wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) and _is_peft(model) else model


def _is_peft(model) -> bool:
    return type(model).__module__.startswith("peft.")


def lora_layers(model) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every PEFT LoRA layer in ``model``: a PEFT wrapper, or the model inside
    one (``get_peft_model`` injects the layers into it in place, so unwrapping leaves them there)."""
    if "peft" not in sys.modules:  # no LoRA layer exists before PEFT is imported
        return []
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in unwrap_model(model).named_modules() if isinstance(m, LoraLayer)]


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The plain transformers state dict; LoRA deltas are added into their base weights.

    The model itself is not changed (merging in place and unmerging would round bf16 weights).
    A model holding LoRA layers without its PEFT wrapper is merged too: its own state dict has
    ``base_layer`` / ``lora_`` keys that no plain model loads.
    """
    base = unwrap_model(model)
    layers = lora_layers(base)
    if not layers:
        return base.state_dict()
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in layers:
            weight = module.get_base_layer().weight.detach().clone()
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight += module.get_delta_weight(adapter).to(weight.dtype)
            out[f"{name}.weight"] = weight
            bias = getattr(module.get_base_layer(), "bias", None)
            if bias is not None:
                out[f"{name}.bias"] = bias.detach().clone()
        for key, value in base.state_dict().items():
            if "lora_" in key or ".base_layer." in key:
                continue
            out.setdefault(key, value)
    return out


def save_model(model, out_dir: str | Path, tokenizer: PreTrainedTokenizerBase | None = None, *,
               state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``model`` (and ``tokenizer``) in HF format with safetensors.

    A LoRA model is saved merged, so ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    ``load_model(out_dir)`` read it back without PEFT. ``state``: the weights to write instead
    of the model's own (a sharded model's, gathered).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = unwrap_model(model)
    state = merged_state_dict(model) if state is None else state
    use_cache = base.config.use_cache
    base.config.use_cache = True  # the saved model is for inference too
    try:
        base.save_pretrained(str(out), state_dict=state, safe_serialization=True)
    finally:
        base.config.use_cache = use_cache
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    match_permissions(out)
    return out


def match_permissions(out: Path) -> None:
    """Give every file in ``out`` the mode of its ``config.json`` (written by a plain ``open``,
    so it follows the user's umask). transformers writes the weights through a temporary file, which
    is created 0600: a model saved for a team or a server to read would be unreadable to them."""
    mode = (out / "config.json").stat().st_mode & 0o777
    for f in out.iterdir():
        if f.is_file() and f.stat().st_mode & 0o777 != mode:
            f.chmod(mode)


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def read_init_info(path: str | Path) -> dict[str, Any] | None:
    """The ``rlxf_init.json`` that ``rlxf init-model`` writes (preset, seed, parameters), if any."""
    f = Path(path) / "rlxf_init.json"
    return json.loads(f.read_text()) if f.is_file() else None
