//! Errors of the heartbeat client.

use crate::config::ConfigError;
use std::fmt;

/// A heartbeat configuration was refused, or an upload or pull failed.
///
/// None of these ever reaches a guarded call: the client reports them through its
/// return values and [`HeartbeatStatus::last_error`](super::HeartbeatStatus).
#[derive(Debug)]
#[non_exhaustive]
pub enum HeartbeatError {
    /// A configuration value is unusable.
    Config {
        /// The field (`servers`, `app`, ...).
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The server could not be reached, or the connection failed or timed out.
    Network {
        /// The server tried.
        server: String,
        /// What happened.
        message: String,
    },
    /// The server answered with an error status.
    Http {
        /// The server.
        server: String,
        /// The HTTP status.
        status: u16,
        /// The server's error message, if it gave one.
        message: String,
    },
    /// The server's answer could not be understood.
    Protocol {
        /// The server.
        server: String,
        /// What was wrong with the answer.
        message: String,
    },
    /// The pulled policies were refused by the policy loader; the previous policies
    /// stay in force.
    Rejected {
        /// The version the server offered.
        version: u64,
        /// Every problem, with its point and field.
        error: ConfigError,
    },
}

impl fmt::Display for HeartbeatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeartbeatError::Config { field, message } => {
                write!(f, "heartbeat configuration, `{field}`: {message}")
            }
            HeartbeatError::Network { server, message } => {
                write!(f, "cannot reach {server}: {message}")
            }
            HeartbeatError::Http {
                server,
                status,
                message,
            } => write!(f, "{server} answered {status}: {message}"),
            HeartbeatError::Protocol { server, message } => {
                write!(f, "unreadable answer from {server}: {message}")
            }
            HeartbeatError::Rejected { version, .. } => {
                // The loader's problems are the source.
                write!(
                    f,
                    "policy version {version} refused, keeping the current policies"
                )
            }
        }
    }
}

impl std::error::Error for HeartbeatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HeartbeatError::Rejected { error, .. } => Some(error),
            _ => None,
        }
    }
}
