//! Every file writer reports a full disk as an error naming the path and the cause.

mod common;

use std::path::Path;

use clrprobe_profile::folded::FoldedOptions;
use clrprobe_profile::speedscope::Grouping;
use clrprobe_profile::{ProfileError, firefox, folded, pprof, speedscope, svg};

fn check(result: Result<(), ProfileError>, what: &str) {
    let err = result.expect_err(what);
    match &err {
        ProfileError::Write { path, source } => {
            assert_eq!(path, Path::new("/dev/full"), "{what}");
            assert_eq!(source.raw_os_error(), Some(28), "{what}: {source}"); // ENOSPC
        }
        other => panic!("{what}: expected a write error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("/dev/full"), "{what}: {text}");
    assert!(text.to_lowercase().contains("no space"), "{what}: {text}");
}

#[test]
fn writers_report_dev_full() {
    let dev_full = Path::new("/dev/full");
    assert!(dev_full.exists(), "/dev/full is needed for this test");
    let p = common::known_profile();
    check(pprof::write_file(&p, dev_full), "pprof");
    check(folded::write_file(&p, 0, &FoldedOptions::default(), dev_full), "folded");
    check(svg::write_file(&p, 0, "t", dev_full), "svg");
    check(speedscope::write_file(&p, "t", Grouping::PerThread, dev_full), "speedscope");
    check(firefox::write_file(&p, 0, "t", dev_full), "firefox");
}

#[test]
fn missing_directory_names_the_path() {
    let p = common::known_profile();
    let path = Path::new("/nonexistent-clrprobe-dir/out.pb.gz");
    let err = pprof::write_file(&p, path).unwrap_err();
    assert!(err.to_string().contains("/nonexistent-clrprobe-dir/out.pb.gz"), "{err}");
    let err = pprof::read_file(path).unwrap_err();
    assert!(matches!(err, ProfileError::Read { .. }), "{err:?}");
}

#[test]
fn stream_writer_errors_name_the_format() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let p = common::known_profile();
    let err = speedscope::to_writer(&p, "t", Grouping::PerKind, Full).unwrap_err();
    assert!(matches!(err, ProfileError::Stream { format: "speedscope", .. }), "{err:?}");
    let err = pprof::to_writer(&p, Full).unwrap_err();
    assert!(matches!(err, ProfileError::Stream { format: "pprof", .. }), "{err:?}");
}
