"""rlxf: reinforcement learning for large language models.

One loop (generate -> evaluate -> train -> sync weights) that runs in a single process on a
CPU laptop and, unchanged, on a cluster. Importing rlxf is cheap: heavy and optional
dependencies (Ray, vLLM, W&B, MLflow) are imported only when a config asks for them.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # rlxf.train / rlxf.TrainResult (rlxf.api) load on first use, so `import rlxf` stays cheap
    if name in ("train", "TrainResult"):
        from rlxf import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlxf' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazy names too, so dir(rlxf) and tab completion show rlxf.train
    return sorted({*globals(), *__all__})


__all__ = ["TrainResult", "__version__", "train"]
