"""The built-in implementations: importing a module registers it (one line per implementation)."""
from . import naive  # noqa: F401  (the baseline is registered first)
from . import chunked  # noqa: F401
from . import fused  # noqa: F401
from . import xformers  # noqa: F401
from . import torch_sdpa  # noqa: F401
from . import torch_sdpa_varlen  # noqa: F401
from . import flex  # noqa: F401
from . import compiled  # noqa: F401
from . import flash_attn  # noqa: F401
from . import flashinfer  # noqa: F401
from . import flash_attn4  # noqa: F401
from . import cudnn_frontend  # noqa: F401
