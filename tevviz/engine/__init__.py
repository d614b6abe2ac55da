"""The tevviz engine: trees, tree attention, the exit law, verifiers, decoding and training."""

from .builders import BuilderConfig
from .errors import TevvizError
from .models import ModelPair, ModelSource, load_pair, with_draft
from .records import RoundRecord, summarize
from .sampling import SamplingConfig
from .session import DecodeConfig, DecodeSession, autoregressive, encode_prompt
from .verifiers import VERIFIERS

__all__ = [
    "VERIFIERS",
    "BuilderConfig",
    "DecodeConfig",
    "DecodeSession",
    "ModelPair",
    "ModelSource",
    "RoundRecord",
    "SamplingConfig",
    "TevvizError",
    "autoregressive",
    "encode_prompt",
    "load_pair",
    "with_draft",
    "summarize",
]
