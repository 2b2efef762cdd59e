//! Why the live gateway could not start, or refused a reload. Each kind says what failed;
//! the text (what `Display` prints) names the file, interface or setting, never key bytes.

use std::fmt;

use espgw_config::ConfigError;

use crate::live::confine::ConfineError;
use crate::seq_store::StoreError;

#[derive(Debug)]
pub enum GatewayError {
    /// The configuration: its file, line and field.
    Config(ConfigError),
    /// A configuration file that group or others may read (it holds keys), or that the
    /// gateway's user cannot read at a reload.
    ConfigFile(String),
    /// A valid configuration this gateway cannot apply: the number of workers, ports
    /// changed at a reload.
    Setting(String),
    /// An interface's facts, or a port that would not open.
    Port(String),
    /// Static keys' sequence state (`--state-dir`); `after_switch_to` is the uid the
    /// gateway had just switched to when the store stopped being usable.
    SequenceState {
        /// What the store said.
        source: StoreError,
        /// Set where the store failed only once privileges were dropped.
        after_switch_to: Option<u32>,
    },
    /// The control socket, the metrics listener or the signal handler.
    Listener(String),
    /// Dropping privileges, the system-call filter, or the process's own settings.
    Confine(ConfineError),
    /// The workers and service threads could not be started.
    Threads(String),
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::Config(e) => e.fmt(f),
            GatewayError::Confine(e) => e.fmt(f),
            GatewayError::SequenceState {
                source,
                after_switch_to: None,
            } => source.fmt(f),
            GatewayError::SequenceState {
                source,
                after_switch_to: Some(uid),
            } => write!(f, "{source} (after switching to uid {uid})"),
            GatewayError::ConfigFile(m)
            | GatewayError::Setting(m)
            | GatewayError::Port(m)
            | GatewayError::Listener(m)
            | GatewayError::Threads(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for GatewayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GatewayError::Config(e) => Some(e),
            GatewayError::Confine(e) => Some(e),
            GatewayError::SequenceState { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ConfigError> for GatewayError {
    fn from(e: ConfigError) -> Self {
        GatewayError::Config(e)
    }
}

impl From<StoreError> for GatewayError {
    fn from(e: StoreError) -> Self {
        GatewayError::SequenceState {
            source: e,
            after_switch_to: None,
        }
    }
}
