"""CUDA templates with tunable knobs; each returns (cuda_source, launch description)."""
