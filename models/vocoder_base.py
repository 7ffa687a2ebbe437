"""What every vocoder module shares: built from its config (object or dict), and the frame geometry it exposes."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn


class ConfiguredVocoder(nn.Module):
    """Base of the vocoder modules: `config_class` names the config dataclass (with from_dict, hop_samples and
    min_frames); the subclass's __init__ takes one config object."""

    config_class: ClassVar[type]

    @classmethod
    def from_config(cls, config: Any) -> "ConfiguredVocoder":
        """Model with random weights for `config` (a config object or its dict)."""
        if isinstance(config, dict):
            config = cls.config_class.from_dict(config)
        return cls(config)

    @property
    def hop_samples(self) -> int:
        """Output samples per mel frame."""
        return self.config.hop_samples

    @property
    def min_frames(self) -> int:
        """Fewest mel frames the network accepts without padding."""
        return self.config.min_frames
