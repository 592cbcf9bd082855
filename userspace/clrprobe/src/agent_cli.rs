//! `clrprobe agent` arguments.
use clap::Args;

use crate::cli::SamplerChoice;

#[derive(Debug, Args)]
#[command(after_help = "Defaults keep the cost low for always-on use: CPU at 49 Hz with frame-pointer stacks (no \
stack copies: --unwind-copies), off-CPU intervals of 5 ms and more, the runtime's counters every 5 s, exceptions (each ExceptionThrown, from a \
second session at Error level in .NET 5+ processes: the runtime writes no catch/finally events with stack walks), allocation \
events (AllocationTick, one per ~100 KB allocated, each with a stack walk in the target) of .NET 5+ processes \
in slices: a second, allocation-only session open 1 s of every 30 s (--alloc-slice, --alloc-period), which cuts \
what those events cost the agent and the targets to about a thirtieth (`cargo xtask bench-agent`, an app allocating \
~100 M objects/s, per second of its own CPU: +18.5 % with 1 s of every 5 s, +6.3 % with 1 s of every 30 s; the same sessions opened without the agent cost the \
targets as much, within the noise of a loaded host: what they pay is the runtime's event writing). The loss: the allocs profile is an estimate, \
scaled up by time followed / time sampled (clrprobe_alloc_sampled_ratio) - unbiased for steady allocation, while \
bursts shorter than the period can be missed or over-weighted. dotnet_gc_heap_total_allocated does not depend \
on it: it sums the runtime's alloc-rate counter (GC.GetTotalAllocatedBytes), exact at each counter poll. \
--alloc-period 0 takes every allocation event (runtimes before .NET 5 always do); --no-alloc none.\n\n\
Endpoints: /metrics (Prometheus text, OpenTelemetry .NET runtime metric names), /debug/pprof/profile?seconds=N, \
/debug/pprof/allocs, /debug/pprof/mutex, /debug/pprof/block (off-CPU), /debug/pprof/exceptions; &pid=P keeps one process.")]
pub struct AgentCmd {
    /// Address to serve HTTP on.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: std::net::SocketAddr,
    /// Every process on the host (the default): CPU of every process, every .NET process
    /// followed, ones that start later too.
    #[arg(short = 'a', long, conflicts_with = "pids")]
    pub all: bool,
    /// Only these processes.
    #[arg(short = 'p', long = "pid", num_args = 1.., value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// With --all: sample the CPU of the .NET processes only (no native CPU for the rest).
    #[arg(long)]
    pub dotnet_only: bool,
    /// Follow only the .NET processes whose parent is this process (a supervisor or a shell).
    #[arg(long, value_name = "PID")]
    pub parent: Option<u32>,
    /// CPU sampling frequency in Hz.
    #[arg(short = 'F', long, default_value_t = 49, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub freq: u64,
    /// Shortest off-CPU interval recorded, in microseconds.
    #[arg(long, default_value_t = 5000)]
    pub offcpu_min_us: u64,
    /// No off-CPU (block) profile.
    #[arg(long)]
    pub no_offcpu: bool,
    /// No allocation events (no allocs profile).
    #[arg(long)]
    pub no_alloc: bool,
    /// Seconds each allocation slice lasts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub alloc_slice: u64,
    /// Seconds from one allocation slice to the next; 0 (or not above --alloc-slice): every
    /// allocation event, in the process's own session.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub alloc_period: u64,
    /// The longest profile?seconds= served, in seconds (samples are kept from each request's
    /// start until it is answered, as Go's endpoint profiles from the request on).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub window: u64,
    /// Seconds an exited process's series and profiles stay.
    #[arg(long, default_value_t = 30)]
    pub exited_grace: u64,
    /// Which CPU sampler to use.
    #[arg(long, value_enum, default_value_t = SamplerChoice::Auto)]
    pub sampler: SamplerChoice,
    /// Copy each sample's user stack (16 KB) and unwind it with DWARF CFI, as `record` does:
    /// stacks through code without frame pointers (Debian's libc) go on to their callers, at
    /// the price of the copies and of every sampled binary's unwind tables. Off: frame
    /// pointers only (.NET's JIT code and libcoreclr keep them).
    #[arg(long)]
    pub unwind_copies: bool,
    /// Seconds between the runtime's EventCounters (thread-pool threads, queue length, work
    /// items); 0: none.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub counters_interval: u32,
    /// Print the EventPipe sessions these settings open in a .NET 5+ process (`clrprobe trace
    /// --providers` form) and exit: `cargo xtask bench-agent` opens them without the agent
    /// (the targets' floor).
    #[arg(long, hide = true)]
    pub print_sessions: bool,
}

#[cfg(target_os = "linux")]
impl AgentCmd {
    /// The allocation events' duty cycle (None: all of them).
    pub fn alloc_duty(&self) -> Option<crate::pipeline::sources::AllocDuty> {
        use std::time::Duration;
        (self.alloc_period > self.alloc_slice)
            .then(|| crate::pipeline::sources::AllocDuty { slice: Duration::from_secs(self.alloc_slice), period: Duration::from_secs(self.alloc_period) })
    }
}
