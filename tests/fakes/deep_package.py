"""A test-sized distribution shaped like timm: an `__init__` that imports every model, a deep import graph.

`deeppkg/__init__.py` imports its models package, whose `__init__` imports every model (a
zoo of `ZOO_MODELS` generated ones among them), as `timm/__init__.py` does; the vision model
reaches `deeppkg.utils.helpers` four imports down (vision -> layers.attention -> layers.norm ->
utils.helpers, two of them relative); it imports `companion` as timm imports torchvision (a
separate distribution, absent here: the import is guarded as timm guards its optional ones);
`deeppkg.unused` and `deeppkg.data` are imported by nothing the models need.
"""

from __future__ import annotations

ZOO_MODELS = 40

VISION = '''\
"""The vision model."""
import torch
from torch import nn

try:
    import companion  # torch's companion, as torchvision is timm's
except ImportError:
    companion = None

from ..layers import Mlp
from deeppkg.layers.attention import Attention
from ._registry import register


class VisionNet(nn.Module):
    """A block of attention and an MLP over [batch, tokens, dim]."""

    def __init__(self, dim: int = 8, hidden: int = 16):
        super().__init__()
        self.attn = Attention(dim)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        return self.mlp(x + self.attn(x))

    def forward_features(self, x):
        return self.attn(x)


def pool(x):
    return torch.mean(x, dim=1)


@register
def vision_tiny(**kwargs):
    return VisionNet(**kwargs)
'''


def _zoo() -> str:
    lines = ['"""Many models nothing above needs (a zoo, as timm\'s)."""', "import torch", "from torch import nn", ""]
    for i in range(ZOO_MODELS):
        lines += [
            "",
            f"class Zoo{i}(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            f"        self.proj = nn.Linear({i + 1}, {i + 2})",
            "",
            "    def forward(self, x):",
            "        return torch.tanh(self.proj(x))",
        ]
    return "\n".join(lines) + "\n"


FILES = {
    "deeppkg/__init__.py": "from .version import __version__\nfrom .models import create_model, list_models\n",
    "deeppkg/version.py": '__version__ = "1.0"\n',
    "deeppkg/models/__init__.py": (
        "from ._registry import create_model, list_models\nfrom .vision import *\nfrom .zoo import *\n"
    ),
    "deeppkg/models/_registry.py": (
        "_MODELS = {}\n\n\ndef register(fn):\n    _MODELS[fn.__name__] = fn\n    return fn\n\n\n"
        "def create_model(name, **kwargs):\n    return _MODELS[name](**kwargs)\n\n\n"
        "def list_models():\n    return sorted(_MODELS)\n"
    ),
    "deeppkg/models/vision.py": VISION,
    "deeppkg/models/zoo.py": _zoo(),
    "deeppkg/layers/__init__.py": "from .mlp import Mlp\nfrom .attention import Attention\nfrom .norm import Norm\n",
    "deeppkg/layers/mlp.py": (
        "import torch.nn as nn\n\nfrom .norm import Norm\n\n\nclass Mlp(nn.Module):\n"
        "    def __init__(self, dim, hidden):\n        super().__init__()\n        self.norm = Norm(dim)\n"
        "        self.fc1 = nn.Linear(dim, hidden)\n        self.fc2 = nn.Linear(hidden, dim)\n\n"
        "    def forward(self, x):\n        return self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))\n"
    ),
    "deeppkg/layers/attention.py": (
        "import torch\nfrom torch import nn\n\nfrom .norm import Norm\nfrom ..utils.helpers import scale_of\n\n\n"
        "class Attention(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.norm = Norm(dim)\n        self.qkv = nn.Linear(dim, 3 * dim)\n"
        "        self.scale = scale_of(dim)\n\n"
        "    def forward(self, x):\n        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)\n"
        "        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v\n"
    ),
    "deeppkg/layers/norm.py": (
        "import torch\nfrom torch import nn\n\nfrom deeppkg.utils import helpers\n\n\nclass Norm(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(dim))\n"
        "        self.eps = helpers.EPS\n\n    def forward(self, x):\n"
        "        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight\n"
    ),
    "deeppkg/utils/__init__.py": "",
    "deeppkg/utils/helpers.py": "import math\n\nEPS = 1e-6\n\n\ndef scale_of(dim):\n    return 1 / math.sqrt(dim)\n",
    "deeppkg/unused/__init__.py": "",
    "deeppkg/unused/tool.py": "import argparse\n\n\ndef main():\n    argparse.ArgumentParser().parse_args()\n",
    "deeppkg/data/loader.py": "def load(path):\n    from ..layers import norm\n\n    return norm, path\n",
}

VISION_CLOSURE = sorted(path for path in FILES if not path.startswith(("deeppkg/unused/", "deeppkg/data/")))
"""The files `deeppkg.models.vision` needs: every one but the unused package and the data loader."""
