//! trybuild cases for the resilience macros live in `tests/`.
