"""The embedded model family that polyplan trains itself from the standard library's source, and
drafter distillation for any target (docs/models-yaml.md, "The embedded family")."""
