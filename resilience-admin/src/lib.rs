#![doc = include_str!("../README.md")]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod api;
pub mod auth;
pub mod cli;
mod dashboard;
pub mod enforcement;
mod fields;
pub mod fleet;
mod lock;
pub mod model;
pub mod policy;
pub mod server;
pub mod store;
pub mod tls;
pub mod wire;
