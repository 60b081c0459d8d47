"""mslaunch: cluster launcher and job orchestration for MindSpore distributed training."""

__version__ = "0.1.0"
