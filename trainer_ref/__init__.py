"""trainer_ref package."""
