//! Configuration errors that name the file, line and field.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the error concerns the whole file.
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(file: &str, line: usize, field: &str, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line,
            field: field.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.field, self.message
        )
    }
}

impl std::error::Error for ConfigError {}
