"""Every `rlxf` command: its arguments here, its work in `rlxf.cli.<command>` (imported lazily)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import typer

ConfigArg = typer.Argument(..., help="Run config (YAML).", exists=False)
# each command's example names fields that command reads: `rlxf dpo --help` offered
# algorithm.kl_coef, an RL field DPO never reads (its reference term is dpo.beta)
OVERRIDE_EXAMPLES = {
    "train": "rollout.n=8 algorithm.kl_coef=0.01", "explain": "rollout.n=8 algorithm.kl_coef=0.01",
    "sft": "sft.steps=200 sft.optim.lr=1e-4", "rm": "rm.steps=100 rm.margin=0.5",
    "dpo": "dpo.loss=ipo dpo.beta=0.1", "label": "label.k=8 rollout.temperature=0.8",
    "eval": "eval.num_problems=100 eval.pass_k=8", "serve-reward": "reward.workers=4 reward.timeout_s=60",
}


def _overrides(command: str):
    return typer.Argument(None, help=f"Dotted overrides, e.g. {OVERRIDE_EXAMPLES[command]}.")


# refused before anything is written: a seed past torch.manual_seed's range (2**64) failed only
# once OUT had been made, where the rerun is refused as "already exists". The quickstart's seed
# is run.seed, whose range is 32 bits (derived seeds read the low 32 bits of each part)
SEED_RANGE = {"min": 0, "max": 2**32 - 1}
TORCH_SEED_RANGE = {"min": 0, "max": 2**64 - 1}


def _impl(module: str):
    return importlib.import_module(f"rlxf.cli.{module}")


def path_override(key: str, path: str | Path) -> str:
    """``key=path`` as an override that reads back as exactly ``path``: unquoted, the value is
    read as YAML, so a directory named ``null`` would be None and `` runs/x`` lose its space."""
    return f"{key}={json.dumps(str(path), ensure_ascii=False)}"


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("train"),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in its run directory from its last checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing run directory of the same name first."),
    ) -> None:
        """Run RL training (GRPO, DAPO, PPO, ...) from a config."""
        _impl("train").run(config, overrides or [], resume=resume, overwrite=overwrite)

    @app.command()
    def quickstart(
        out: Path = typer.Argument(Path("runs/quickstart"), help="Directory for the quickstart's runs."),
        seed: int | None = typer.Option(None, "--seed", **SEED_RANGE, help="Seed of every stage (default 0; with "
                                        "--resume, the quickstart's own)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete OUT first if it exists."),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted quickstart in OUT: finished "
                                    "stages are kept, an interrupted run continues from its last checkpoint."),
        rl_steps: int | None = typer.Option(None, "--rl-steps", min=1, help="GRPO steps (default: the recipe's; with --resume, the quickstart's own)."),
        sft_steps: int | None = typer.Option(None, "--sft-steps", min=1, help="SFT steps (default: the recipe's; with --resume, the quickstart's own)."),
        preset: str | None = typer.Option(None, "--preset", help="Model size preset (see init-model; default tiny; "
                                          "with --resume, the quickstart's own)."),
        remedy: bool | None = typer.Option(None, "--remedy/--no-remedy",
                                           help="Add PPO-ptx's supervised loss on easy demonstrations to GRPO's "
                                           "(default), or train on the hard problems alone to see what they cost "
                                           "the easy ones. With --resume, the quickstart's own."),
    ) -> None:
        """The quickstart: SFT a tiny model on easy arithmetic, GRPO on harder problems, compare."""
        _impl("quickstart").run(out, seed=seed, overwrite=overwrite, rl_steps=rl_steps, sft_steps=sft_steps,
                                preset=preset, remedy=remedy, resume=resume)

    @app.command()
    def sft(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("sft"),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in its run directory from its last checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing run directory of the same name first."),
    ) -> None:
        """Supervised fine-tuning on demonstrations (prompt/response data or a task's answers)."""
        _impl("sft").run(config, overrides or [], overwrite=overwrite, resume=resume)

    @app.command()
    def rm(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("rm"),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in its run directory from its last checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing run directory of the same name first."),
    ) -> None:
        """Train a Bradley-Terry reward model on preference pairs (chosen / rejected)."""
        _impl("preference").run("rm", config, overrides or [], resume=resume, overwrite=overwrite)

    @app.command()
    def dpo(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("dpo"),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in its run directory from its last checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing run directory of the same name first."),
    ) -> None:
        """Preference optimisation without a reward model: DPO, IPO, conservative DPO or SimPO (dpo.loss)."""
        _impl("preference").run("dpo", config, overrides or [], resume=resume, overwrite=overwrite)

    @app.command()
    def label(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("label"),
        overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing run directory of the same name first."),
        resume: bool = typer.Option(False, "--resume", help="Continue a stopped labelling from its last finished batch."),
    ) -> None:
        """RLAIF: sample k responses per prompt, rank them with the reward (verifiers, judge), write pairs."""
        _impl("label").run(config, overrides or [], overwrite=overwrite, resume=resume)

    @app.command("eval")
    def eval_(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("eval"),
        checkpoint: Path | None = typer.Option(None, "--checkpoint", help="Run, checkpoint or model directory to evaluate; default model.path. Results are appended to the run's eval.jsonl."),
    ) -> None:
        """Evaluate a model on the held-out split: greedy accuracy and pass@k."""
        _impl("evaluate").run(config, overrides or [], checkpoint=checkpoint)

    @app.command()
    def explain(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("explain"),
        full_config: bool = typer.Option(False, "--full-config", help="Print every config field, not only those set."),
    ) -> None:
        """Print the batch arithmetic, a memory estimate per role, the kernels picked here, and the config."""
        _impl("explain").run(config, overrides or [], full_config=full_config)

    @app.command("config-docs")
    def config_docs(
        section: str | None = typer.Argument(None, help="Only this section, e.g. `rollout`."),
    ) -> None:
        """Print every config field with its type, default and meaning."""
        _impl("config_docs").run(section)

    @app.command()
    def report(
        run_dirs: list[Path] = typer.Argument(..., help="Run directories; several are overlaid for comparison."),
        out: Path | None = typer.Option(None, "--out", help="Output HTML file; default RUN_DIR/report.html for one "
                                        "run, compare-A-vs-B.html beside the first run for several."),
    ) -> None:
        """Write report.html with plots of a run's metrics (several runs overlaid)."""
        _impl("report").run(run_dirs, out)

    @app.command("init-model")
    def init_model(
        out: Path = typer.Argument(..., help="Directory to write the model and tokenizer to."),
        preset: str = typer.Option("tiny", "--preset", help="Size preset: nano, tiny, small, base."),
        seed: int = typer.Option(0, "--seed", **TORCH_SEED_RANGE, help="Initialisation seed."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT."),
    ) -> None:
        """Build a Qwen2-architecture model from a size preset, with a tokenizer trained offline."""
        _impl("init_model").run(out, preset=preset, seed=seed, overwrite=overwrite)

    @app.command()
    def generate(
        model: str = typer.Argument(..., help="Run, checkpoint or model directory, or a hub id."),
        prompts: list[str] | None = typer.Argument(None, help="Prompt texts (formatted as --chat-template says)."),
        prompts_file: Path | None = typer.Option(
            None, "--prompts-file", help="JSONL file of prompts, one a line: {\"prompt\": TEXT} or "
            "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]} (a chat, rendered with the chat template); "
            "after any PROMPTS."),
        backend: str = typer.Option("native", "--backend", help="Rollout backend: native or hf."),
        n: int = typer.Option(1, "-n", min=1, help="Samples per prompt (more than 1 needs --temperature > 0)."),
        temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 = greedy."),
        max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
        chat_template: bool | None = typer.Option(
            None, "--chat-template/--no-chat-template",
            help="Format prompts with the tokenizer's chat template, or as plain text. Default: as the run "
            "trained (data.apply_chat_template and data.system_prompt of its config.yaml) for a run or "
            "checkpoint directory; otherwise the chat template when the tokenizer has one."),
    ) -> None:
        """Generate responses from a model with a rollout engine."""
        _impl("generate").run(model, prompts or [], backend=backend, n=n, temperature=temperature,
                              max_new_tokens=max_new_tokens, chat_template=chat_template, prompts_file=prompts_file)

    @app.command("serve-reward")
    def serve_reward(
        config: Path = ConfigArg,
        overrides: list[str] | None = _overrides("serve-reward"),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(8008, "--port", min=0, max=65535, help="TCP port (0: any free one)."),
    ) -> None:
        """Serve the config's verifiers over HTTP (batch scoring endpoint + health)."""
        _impl("serve_reward").run(config, overrides or [], host=host, port=port)
