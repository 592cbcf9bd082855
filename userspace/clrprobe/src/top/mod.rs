//! `clrprobe top`: a live terminal view (placeholder until the view lands).
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error("not implemented yet")]
    Todo,
}

pub fn run(_cmd: &crate::cli::TopCmd) -> Result<(), TopError> {
    Err(TopError::Todo)
}
