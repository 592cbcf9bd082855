//! How errors reach the user at the CLI edge: one line, each cause said once.

/// The error and its causes joined with `: `, leaving out a cause whose text the line already
/// holds (errors that print their source and also return it as `source()` would say it twice:
/// "no such process: 9: no such process: 9").
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// Did the error come from writing to a closed pipe (`clrprobe report | head -1`)?
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("EventPipe session on pid {pid}: {source}")]
    struct Outer {
        pid: u32,
        #[source]
        source: Inner,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("no such process: 9")]
    struct Inner;

    #[test]
    fn each_cause_is_said_once() {
        let e = anyhow::Error::new(Outer { pid: 9, source: Inner }).context("trace failed");
        assert_eq!(one_line(&e), "trace failed: EventPipe session on pid 9: no such process: 9");
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&pipe));
        assert!(!is_broken_pipe(&e));
    }
}
