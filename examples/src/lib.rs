//! Runnable examples of the resilience toolkit; see the `[[example]]` targets.
