"""rlxf: reinforcement learning for large language models.

One loop (generate -> evaluate -> train -> sync weights) that runs in a single process on a
CPU laptop and, unchanged, on a cluster. Importing rlxf is cheap: heavy and optional
dependencies (Ray, vLLM, W&B, MLflow) are imported only when a config asks for them.
"""

__version__ = "0.1.0"
