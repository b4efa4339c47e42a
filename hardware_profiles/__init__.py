"""One YAML a GPU, validated into `HardwareProfile`; `detect()` matches the live device."""
from hardware_profiles.profile import HardwareProfile, load_profile, list_profiles, detect, UnknownProfileError

__all__ = ["HardwareProfile", "load_profile", "list_profiles", "detect", "UnknownProfileError"]
