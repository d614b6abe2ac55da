"""The tevviz engine: trees, tree attention, the exit law, verifiers, decoding and training."""

from .builders import BuilderConfig
from .errors import TevvizError
from .models import ModelPair, load_pair
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
    "RoundRecord",
    "SamplingConfig",
    "TevvizError",
    "autoregressive",
    "encode_prompt",
    "load_pair",
    "summarize",
]
