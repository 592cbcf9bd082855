//! Live: clrprobe as root against files and sockets a second, unprivileged user (`nobody`, via
//! setpriv) plants where clrprobe writes or reads. Nothing outside the output path is written,
//! root's files stay untouched, nothing blocks, and each refusal is said in one line.
use std::{
    io::Write,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

const NOBODY: u32 = 65534;
/// The "sudo user" the tests pretend ran `sudo clrprobe` (outputs are handed to it).
const SUDO_USER: u32 = 4242;

/// Runs a command as `nobody`; panics if it fails.
fn as_nobody(args: &[&str]) {
    let st = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .status()
        .expect("setpriv (util-linux)");
    assert!(st.success(), "as nobody: {args:?}");
}

/// Runs clrprobe to its end within `deadline` (killed and failed otherwise: a hang).
fn clrprobe(args: &[&str], deadline: Duration) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(args)
        .env("SUDO_UID", SUDO_USER.to_string())
        .env("SUDO_GID", SUDO_USER.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run clrprobe");
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("clrprobe {args:?} hung for {deadline:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().expect("output"), t0.elapsed())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A root-owned 0600 file in a root-only directory: what an attacker wants overwritten.
struct Secret {
    dir: PathBuf,
    file: PathBuf,
}

const SECRET: &[u8] = b"root's secret\n";

impl Secret {
    fn new(name: &str) -> Self {
        let dir = clrprobe_tests::scratch_dir(&format!("sf-secret-{name}"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, SECRET).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        Secret { dir, file }
    }

    fn assert_untouched(&self) {
        let m = std::fs::symlink_metadata(&self.file).unwrap();
        assert_eq!(std::fs::read(&self.file).unwrap(), SECRET, "secret rewritten");
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o600), "secret's owner or mode changed");
        let names: Vec<_> = std::fs::read_dir(&self.dir).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, ["secret"], "files written next to the secret");
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CPU-bound native process to record (never .NET).
struct Busy(Child);

impl Busy {
    fn start() -> Self {
        Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_link_to(p: &Path, target: &Path) -> bool {
    std::fs::read_link(p).is_ok_and(|t| t == target)
}

const SUFFIXES: [&str; 2] = [".cpu.pb.gz", ".cpu.folded"];

#[test]
fn symlinks_planted_at_the_output_prefix_in_tmp_are_refused() {
    require_root();
    let secret = Secret::new("tmp");
    let prefix = format!("/tmp/clrprobe-sf-out-{}", std::process::id());
    let links: Vec<String> = SUFFIXES.iter().map(|s| format!("{prefix}{s}")).collect();
    for l in &links {
        let _ = std::fs::remove_file(l);
        as_nobody(&["ln", "-s", secret.file.to_str().unwrap(), l]);
    }
    let busy = Busy::start();
    let (out, _) = clrprobe(&["record", "--quiet", "-p", &busy.pid(), "-d", "1", "--format", "pprof,folded", "-o", &prefix], Duration::from_secs(30));
    let err = stderr(&out);
    assert!(!out.status.success(), "refusals fail the command: {err}");
    for l in &links {
        assert!(err.contains(&format!("{l} is a symbolic link: refusing to replace it")), "{l}: {err}");
        assert!(is_link_to(Path::new(l), &secret.file), "{l} replaced");
    }
    assert!(!err.contains("could not write"), "one cause, said once: {err}");
    secret.assert_untouched();
    // No temporary file left either.
    let stray: Vec<_> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!(".clrprobe-sf-out-{}", std::process::id())))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    for l in &links {
        std::fs::remove_file(l).unwrap();
    }
    // Without the links, the same command writes, and hands the files to the sudo user.
    let (out, _) = clrprobe(&["record", "--quiet", "-p", &busy.pid(), "-d", "1", "--format", "pprof,folded", "-o", &prefix], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    for l in &links {
        let m = std::fs::symlink_metadata(l).unwrap();
        assert!(m.file_type().is_file() && m.uid() == SUDO_USER && m.gid() == SUDO_USER, "{l}: {m:?}");
        std::fs::remove_file(l).unwrap();
    }
}

#[test]
fn a_directory_of_another_user_or_a_link_to_a_directory_is_refused_before_recording() {
    require_root();
    let secret = Secret::new("dir");
    let nobody_dir = format!("/tmp/clrprobe-sf-nobody-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&nobody_dir);
    as_nobody(&["mkdir", &nobody_dir]);
    as_nobody(&["ln", "-s", secret.file.to_str().unwrap(), &format!("{nobody_dir}/out.cpu.pb.gz")]);
    let dir_link = format!("/tmp/clrprobe-sf-dirlink-{}", std::process::id());
    let _ = std::fs::remove_file(&dir_link);
    as_nobody(&["ln", "-s", secret.dir.to_str().unwrap(), &dir_link]);
    let busy = Busy::start();
    for (prefix, why) in [
        (format!("{nobody_dir}/out"), format!("directory {nobody_dir} belongs to uid {NOBODY}")),
        (format!("{dir_link}/out"), format!("{dir_link} is a symbolic link owned by uid {NOBODY}")),
        (format!("{nobody_dir}/sub/out"), format!("directory {nobody_dir}/sub belongs to uid {NOBODY}").replace("/sub belongs", "/sub belongs")),
    ] {
        if prefix.ends_with("/sub/out") {
            // nobody pre-creates the subdirectory too.
            as_nobody(&["mkdir", "-p", &format!("{nobody_dir}/sub")]);
        }
        // 20 s asked: refused before recording, so it ends at once.
        let (out, took) = clrprobe(&["record", "--quiet", "-p", &busy.pid(), "-d", "20", "-o", &prefix], Duration::from_secs(15));
        let err = stderr(&out);
        assert!(!out.status.success(), "{prefix}: {err}");
        assert!(err.contains(&why), "{prefix}: expected {why:?} in {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(took < Duration::from_secs(10), "{prefix}: refused only after {took:?}");
        secret.assert_untouched();
    }
    assert!(is_link_to(Path::new(&format!("{nobody_dir}/out.cpu.pb.gz")), &secret.file));
    std::fs::remove_dir_all(&nobody_dir).unwrap();
    std::fs::remove_file(&dir_link).unwrap();
}

#[test]
fn a_missing_output_directory_is_created_for_the_sudo_user() {
    require_root();
    let base = format!("/tmp/clrprobe-sf-missing-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&base);
    let busy = Busy::start();
    let prefix = format!("{base}/a/b/out");
    let (out, _) = clrprobe(&["record", "--quiet", "-p", &busy.pid(), "-d", "1", "--format", "pprof", "-o", &prefix], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    for d in [base.clone(), format!("{base}/a"), format!("{base}/a/b")] {
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777 & !0o022), (SUDO_USER, 0o755), "{d}");
    }
    assert!(Path::new(&format!("{prefix}.cpu.pb.gz")).is_file());
    std::fs::remove_dir_all(&base).unwrap();
}

fn record_json(pid: u32, name: &str, extra: &[&str]) -> (Value, String) {
    let dir = clrprobe_tests::scratch_dir(&format!("sf-{name}"));
    let prefix = dir.join("profile");
    let mut args = vec!["record", "--json", "--quiet", "--format", "pprof", "-d", "2"];
    let pid_s = pid.to_string();
    args.extend(["-p", &pid_s, "-o", prefix.to_str().unwrap()]);
    args.extend(extra);
    let (out, _) = clrprobe(&args, Duration::from_secs(40));
    let err = stderr(&out);
    assert!(out.status.success(), "{name}: {err}");
    let summary = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{name}: summary JSON: {e}: {err}"));
    std::fs::remove_dir_all(&dir).unwrap();
    (summary, err)
}

/// The perf-map state clrprobe reports for `pid`, as JSON text.
fn perf_map_state(summary: &Value, pid: u32) -> String {
    summary["perf_maps"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e[0] == pid))
        .map(|e| e[1].to_string())
        .unwrap_or_else(|| panic!("no perf map state for {pid}: {summary}"))
}

#[test]
fn fifo_link_and_foreign_perf_maps_are_refused_without_blocking() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let map = format!("/tmp/perf-{}.map", w.pid);
    let dump = format!("/tmp/jit-{}.dump", w.pid);
    let plants: [(&str, &[&[&str]], &str); 3] = [
        ("fifo", &[&["mkfifo", &map], &["mkfifo", &dump]], "is a FIFO, not a regular file"),
        ("dev-zero", &[&["ln", "-s", "/dev/zero", &map], &["ln", "-s", "/dev/zero", &dump]], "is a symbolic link"),
        (
            "foreign",
            &[&["sh", "-c", &format!("echo '0x1000 0x10 Evil::Planted()' > {map}")]],
            "belongs to uid 65534, not to the target's user",
        ),
    ];
    for (name, cmds, why) in plants {
        for c in cmds {
            as_nobody(c);
        }
        let before: Vec<_> = [&map, &dump].iter().map(|p| std::fs::symlink_metadata(p).ok().map(|m| (m.file_type(), m.uid(), m.ino()))).collect();
        let (summary, err) = record_json(w.pid, name, &[]);
        let state = perf_map_state(&summary, w.pid);
        assert!(state.contains("failed") && state.contains(&map) && state.contains(why), "{name}: {state}; {err}");
        // Left as they were: clrprobe neither removed nor replaced what it did not create.
        let after: Vec<_> = [&map, &dump].iter().map(|p| std::fs::symlink_metadata(p).ok().map(|m| (m.file_type(), m.uid(), m.ino()))).collect();
        assert_eq!(before, after, "{name}");
        assert!(!summary.to_string().contains("Evil::Planted"), "{name}: a foreign map named frames");
        for p in [&map, &dump] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// pid_max is 32768 here: a target's pid was an earlier process's, whose perf map (root's)
/// stayed in /tmp. It is neither taken as "already on" nor read: the map is switched on, the
/// runtime rewrites the file, and the frames get the target's names.
#[test]
fn a_stale_perf_map_of_an_earlier_process_with_the_pid_is_not_used() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let map = format!("/tmp/perf-{}.map", w.pid);
    std::fs::write(&map, "7f0000000000 100000000000 Evil::Stale()\n").unwrap();
    let status = Command::new("touch").args(["-d", "1 hour ago", &map]).status().unwrap();
    assert!(status.success());
    let (summary, err) = record_json(w.pid, "stale", &[]);
    let state = perf_map_state(&summary, w.pid);
    assert!(state.contains("enabled-by-clrprobe"), "{state}; {err}");
    assert!(!summary.to_string().contains("Evil::Stale"), "a stale map named frames: {summary}");
    assert!(!err.contains("Evil::Stale") && !err.contains("WARN"), "{err}");
    assert!(!std::path::Path::new(&map).exists(), "the map clrprobe switched on is removed when it switches it off");
}

#[test]
fn a_fake_diagnostics_socket_of_another_user_is_refused() {
    require_root();
    let sleeper = Busy(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = sleeper.0.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().nth(19).unwrap().parse().unwrap();
    let path = format!("/tmp/dotnet-diagnostic-{pid}-{start}-socket");
    let fake = std::os::unix::net::UnixListener::bind(&path).unwrap();
    fake.set_nonblocking(true).unwrap();
    std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    // A stale socket of an earlier process with this pid (pids are reused, sockets stay in
    // /tmp): root's, but not named for this process: not used in place of the refused one.
    let stale = format!("/tmp/dotnet-diagnostic-{pid}-{}-socket", start - 1);
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let out_file = clrprobe_tests::scratch_file("sf-fake", "out.nettrace");
    let (out, _) = clrprobe(&["trace", "-p", &pid.to_string(), "--duration", "1", "-o", out_file.to_str().unwrap()], Duration::from_secs(20));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("{path} belongs to uid {NOBODY}, not to the target's user (0) or root: not used as its diagnostics socket")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(matches!(fake.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "clrprobe connected to the fake socket");
    assert!(!out_file.exists(), "no trace file for a failed trace");
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&stale).unwrap();
}

/// Peak RSS (KiB) of `clrprobe record --json ARGS` as it says in its summary: VmHWM of its own
/// address space after the outputs were written. (wait4's ru_maxrss would not do for a
/// comparison: exec keeps the spawning process's peak, so it reads at least this test
/// process's RSS, which other tests running beside it raise — CI read 77 MB for a 32 MB job.)
fn own_peak_kib(args: &[&str]) -> (Output, u64) {
    let (out, _) = clrprobe(args, Duration::from_secs(40));
    let kib = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| Some(v["memory"]["final_peak_kb"].as_u64()?.max(v["memory"]["recording_peak_kb"].as_u64()?)))
        .unwrap_or(0);
    (out, kib)
}

/// Peak RSS (KiB) of `clrprobe ARGS`, measured by the kernel (wait4's ru_maxrss): an upper
/// bound only (it includes this test process's RSS at the spawn, see [`own_peak_kib`]).
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives its rusage
fn peak_rss_kib(args: &[&str]) -> (Output, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as i32;
    // Collect the output on threads; reap with wait4 to get the child's own rusage.
    let (mut so, mut se) = (child.stdout.unwrap(), child.stderr.unwrap());
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).unwrap();
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).unwrap();
        v
    });
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter; pid is our child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    let out = Output { status: std::os::unix::process::ExitStatusExt::from_raw(status), stdout: t1.join().unwrap(), stderr: t2.join().unwrap() };
    (out, ru.ru_maxrss as u64)
}

#[test]
fn a_300_mb_single_line_perf_map_is_read_within_its_cap() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let dir = clrprobe_tests::scratch_dir("sf-bigmap");
    let prefix = dir.join("p");
    let pid = w.pid.to_string();
    let args = ["record", "--json", "--quiet", "--format", "pprof", "-d", "2", "-p", &pid, "-o", prefix.to_str().unwrap()];
    // The same recording with the runtime's own map, for the memory it needs anyway.
    let (out, base_kib) = own_peak_kib(&args);
    assert!(out.status.success() && base_kib > 0, "{}", stderr(&out));
    let map = format!("/tmp/perf-{}.map", w.pid);
    {
        let mut f = std::fs::File::create(&map).unwrap();
        f.write_all(b"0x1000 0x10 ").unwrap();
        let chunk = vec![b'A'; 1 << 20];
        for _ in 0..300 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b"\n").unwrap();
    }
    let (out, big_kib) = own_peak_kib(&args);
    std::fs::remove_file(&map).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success() && big_kib > 0, "{}", stderr(&out));
    eprintln!("peak RSS: {base_kib} KiB with the runtime's map, {big_kib} KiB with a 300 MB one-line map");
    // The 300 MB line is skipped as it streams in (64 KiB record cap, 1 MiB reads).
    assert!(big_kib < base_kib + 32 * 1024, "{big_kib} KiB vs {base_kib} KiB");
}

#[test]
fn a_pprof_bomb_is_refused_in_one_line_within_the_decode_cap() {
    let dir = clrprobe_tests::scratch_dir("sf-bomb");
    // 24 M empty samples: 48 MB of protobuf in a 48 KB gzip file.
    let path = dir.join("empty-samples.pb.gz");
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::best());
    let chunk = [0x12u8, 0x00].repeat(1 << 16);
    for _ in 0..(24 << 20) / (1 << 16) {
        gz.write_all(&chunk).unwrap();
    }
    gz.finish().unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 64 * 1024);
    let (out, kib) = peak_rss_kib(&["report", path.to_str().unwrap()]);
    let err = stderr(&out);
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("report of the bomb: peak RSS {kib} KiB");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end(), format!("clrprobe: error: {} is not a readable pprof profile: decoding samples passes the cap of 256 MiB; refused", path.display()));
    // 256 MiB of decoded messages (vectors may hold up to twice their length) and the rest.
    assert!(kib < 600 * 1024, "{kib} KiB");
}

#[test]
fn report_into_a_closed_pipe_exits_quietly() {
    let dir = clrprobe_tests::scratch_dir("sf-pipe");
    let path = dir.join("p.pb.gz");
    use clrprobe_profile::{Frame, FrameKind, LabelSet, ProfileBuilder, SampleType};
    let mut b = ProfileBuilder::new(vec![SampleType::new("cpu", "samples")]);
    let l = b.intern_labels(LabelSet::default()).unwrap();
    for i in 0..20_000 {
        let f = b.intern_frame(Frame::new(format!("Namespace.Type.Method{i}(System.String)"), "m.dll", FrameKind::Jit)).unwrap();
        let s = b.intern_stack(&[f]).unwrap();
        b.add_sample(s, &[1], l).unwrap();
    }
    clrprobe_profile::pprof::write_file(&b.build(), &path).unwrap();
    // `clrprobe report --json | head -1`: megabytes of JSON into a pipe closed after one line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["report", "--json", "--top", "20000"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    assert_eq!(first.trim(), "{");
    // The read end is closed now (dropped above).
    let out = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}: {}", out.status, stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn a_deleted_diagnostics_socket_is_warned_about_once() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    // Only the socket this process made: an earlier process's with this pid may be in /tmp too
    // (pids are reused, killed runtimes leave theirs), and it stays (clrprobe must not take it).
    let socket = clrprobe_tests::diagnostics_socket(w.pid).unwrap();
    assert!(socket.exists(), "{} missing", socket.display());
    std::fs::remove_file(&socket).unwrap();
    let (summary, err) = record_json(w.pid, "nosocket", &[]);
    let warnings: Vec<String> = summary["warnings"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    let said: Vec<&String> = warnings.iter().filter(|w| w.contains("diagnostics socket was not found")).collect();
    assert_eq!(said.len(), 1, "{warnings:?}; {err}");
    assert!(said[0].starts_with(&format!("PID {} (", w.pid)), "{}", said[0]);
    assert_eq!(err.matches("diagnostics socket was not found").count(), 1, "said once on stderr: {err}");
}

#[test]
fn a_native_target_is_said_not_to_be_dotnet_once() {
    require_root();
    let busy = Busy::start();
    let (out, _) = clrprobe(&["record", "--quiet", "--json", "--format", "pprof", "-p", &busy.pid(), "-d", "1", "-o", &format!("/tmp/clrprobe-sf-native-{}", std::process::id())], Duration::from_secs(30));
    let err = stderr(&out);
    for kind in ["cpu", "offcpu"] {
        let _ = std::fs::remove_file(format!("/tmp/clrprobe-sf-native-{}.{kind}.pb.gz", std::process::id()));
    }
    let _ = std::fs::remove_file(format!("/tmp/clrprobe-sf-native-{}.events.json", std::process::id()));
    assert!(out.status.success(), "{err}");
    let line = format!("PID {} (sh) is not a .NET process: recording native CPU only", busy.pid());
    assert_eq!(err.matches(&line).count(), 1, "{err}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["warnings"].as_array().unwrap().iter().any(|w| w == &Value::String(line.clone())), "{summary}");
}
