//! Checks of the workspace as a whole, run by the README's test command with the
//! other tests: files that two published crates each keep a copy of stay equal.
//!
//! Each published crate builds from its own package, so a file two of them need is
//! kept in each (a proc-macro crate cannot depend on the runtime, and a module meant
//! for the workspace only is not made public to share it). The tests here read the
//! source tree, which only the workspace has.

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the checks crate sits in the workspace root")
        .to_path_buf()
}

/// The README's examples, compiled and run as doc tests (the README is the
/// repository's front page, not a crate's docs).
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
