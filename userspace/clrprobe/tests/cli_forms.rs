//! The command line as perf and dotnet-trace users type it: every accepted form parses to the
//! values meant, and every bad one fails with exactly one line naming the problem (the real
//! binary's stderr).
use std::{path::PathBuf, process::Command, time::Duration};

use clap::Parser;
use clrprobe::cli::{Cli, Command as Sub, RecordCmd, TraceFormat};
use clrprobe::output::OutputName;

fn record(args: &[&str]) -> RecordCmd {
    let mut argv = vec!["clrprobe", "record"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}")).command {
        Sub::Record(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepted_forms_parse_to_what_they_mean() {
    // -p lists and repeats, --process-id alias.
    assert_eq!(record(&["-p", "1,2", "-p", "3"]).pids, [1, 2, 3]);
    assert_eq!(record(&["--process-id", "7"]).pids, [7]);
    assert_eq!(record(&["--pid", "8", "9"]).pids, [8, 9]);
    // -n NAME (repeats), -a.
    assert_eq!(record(&["-n", "dotnet", "-n", "MyApp"]).names, ["dotnet", "MyApp"]);
    assert!(record(&["-a"]).all);
    // Durations.
    let d = |s: &str| record(&["-p", "1", "-d", s]).duration;
    assert_eq!(d("10"), Some(Duration::from_secs(10)));
    assert_eq!(d("2.5"), Some(Duration::from_millis(2500)));
    assert_eq!(d("10s"), Some(Duration::from_secs(10)));
    assert_eq!(d("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(d("5m"), Some(Duration::from_secs(300)));
    assert_eq!(d("00:00:10"), Some(Duration::from_secs(10)));
    assert_eq!(d("1:02:03"), Some(Duration::from_secs(3723)));
    // Rates, -g (with or without a mode, as perf takes it).
    assert_eq!(record(&["-p", "1", "-F", "999"]).freq, 999);
    assert_eq!(record(&["-p", "1"]).freq, 99);
    assert_eq!(record(&["-p", "1", "-g"]).call_graph.as_deref(), Some("fp"));
    assert_eq!(record(&["-p", "1", "--call-graph", "dwarf"]).call_graph.as_deref(), Some("dwarf"));
    // trace: -n, --format, durations.
    let t = match Cli::try_parse_from(["clrprobe", "trace", "-n", "app", "--format", "speedscope", "-d", "00:01:00"]).unwrap().command {
        Sub::Trace(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!((t.name.as_deref(), t.format, t.duration), (Some("app"), TraceFormat::Speedscope, Some(Duration::from_secs(60))));
    // report takes prefixes and files.
    assert!(Cli::try_parse_from(["clrprobe", "report", "out/app", "x.cpu.pb.gz", "x.events.json"]).is_ok());
}

#[test]
fn output_names_a_prefix_a_file_or_a_directory() {
    let o = |s: &str| OutputName::parse(&PathBuf::from(s), "clrprobe-1");
    assert_eq!(o("out/app").prefix, PathBuf::from("out/app"));
    assert_eq!(o("out/app").file, None);
    // A pprof file name: no `x.pb.gz.pb.gz`; the prefix drops the suffix (and a kind).
    assert_eq!(o("x.pb.gz").prefix, PathBuf::from("x"));
    assert_eq!(o("x.pb.gz").file, Some((PathBuf::from("x.pb.gz"), ".pb.gz")));
    assert_eq!(o("x.cpu.pb.gz").prefix, PathBuf::from("x"));
    assert_eq!(o("flame.svg").prefix, PathBuf::from("flame"));
    assert_eq!(o("p.speedscope.json").file.map(|f| f.1), Some(".speedscope.json"));
    let dir = std::env::temp_dir();
    assert_eq!(o(dir.to_str().unwrap()).prefix, dir.join("clrprobe-1"));
    assert_eq!(o("some/dir/").prefix, PathBuf::from("some/dir/clrprobe-1"));
}

#[test]
fn bad_forms_fail_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["record", "-p", "1", "-F", "0"], "frequency"),
        (&["record", "-p", "1", "-F", "200000"], "frequency"),
        (&["record", "-p", "1", "-d", "0"], "duration"),
        (&["record", "-p", "1", "-d", "10x"], "duration"),
        (&["record", "-p", "1", "-d", "1:75"], "duration"),
        (&["record", "-p", "1,x"], "pid"),
        (&["record", "-p", "0"], "pid 0"),
        (&["record", "-a", "-p", "1"], "cannot be used"),
        (&["record", "-n", "definitely-no-such-process-name", "-d", "1"], "no process named"),
        (&["top", "-p", "1", "-F", "0"], "frequency"),
        (&["trace", "-p", "1", "--format", "chromium"], "chromium"),
    ];
    for (args, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
        assert!(lines[0].starts_with("clrprobe: error: ") && lines[0].contains(want), "{args:?}: {err}");
    }
}
