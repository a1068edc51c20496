"""Metrics: sinks (JSONL always; TensorBoard / W&B / MLflow when enabled), progress, report."""

from rlxf.metrics.sinks import (
    JsonlSink,
    JsonlWriter,
    MetricsSink,
    MultiSink,
    NullSink,
    build_sinks,
    read_jsonl,
)

__all__ = ["JsonlSink", "JsonlWriter", "MetricsSink", "MultiSink", "NullSink", "build_sinks", "read_jsonl"]
