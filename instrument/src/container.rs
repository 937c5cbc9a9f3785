//! Fatbinary, ELF and PTX image reader.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError { #[error("todo")] Todo }
pub fn extract_command(_: &std::path::Path, _: Option<&std::path::Path>) -> Result<String, ContainerError> { Err(ContainerError::Todo) }
