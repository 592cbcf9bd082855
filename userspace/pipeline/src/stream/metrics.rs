//! `/metrics`: Prometheus text exposition (format 0.0.4). The .NET runtime metrics use the
//! OpenTelemetry semantic-convention names as the OTel Prometheus exporter writes them (dots
//! to underscores, unit suffix, `_total` on counters): `dotnet.exceptions` →
//! `dotnet_exceptions_total{error_type}`, `dotnet.gc.collections` →
//! `dotnet_gc_collections_total{gc_heap_generation}`, … Every series carries the process
//! labels `pid`, `process_name`, `container_id`, `runtime_version`. What only clrprobe knows
//! and its own health are `clrprobe_*`.
use std::fmt::Write;

use super::{
    aggregate::Aggregator,
    counters::{Counters, PAUSE_BUCKETS_S},
    records::ProcessInfo,
};

/// Escapes a label value (backslash, double quote, newline).
fn esc(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn proc_labels(i: &ProcessInfo) -> String {
    format!(
        "pid=\"{}\",process_name=\"{}\",container_id=\"{}\",runtime_version=\"{}\"",
        i.pid,
        esc(&i.name),
        esc(&i.container_id),
        esc(&i.runtime_version)
    )
}

fn secs(ns: u64) -> String {
    format!("{}", ns as f64 / 1e9)
}

type Rows<'a> = Vec<(&'a ProcessInfo, &'a Counters)>;

struct Family<'o> {
    out: &'o mut String,
}

impl Family<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One series per process from `value` (None: no series for that process).
    fn per_process(&mut self, rows: &Rows<'_>, name: &str, kind: &str, help: &str, value: impl Fn(&Counters) -> Option<String>) {
        self.head(name, kind, help);
        for (i, c) in rows {
            if let Some(v) = value(c) {
                let _ = writeln!(self.out, "{name}{{{}}} {v}", proc_labels(i));
            }
        }
    }

    /// Series per process and per key.
    fn per_key(&mut self, rows: &Rows<'_>, name: &str, help: &str, label: &str, values: impl Fn(&Counters) -> Vec<(String, u64)>) {
        self.head(name, "counter", help);
        for (i, c) in rows {
            for (k, v) in values(c) {
                let _ = writeln!(self.out, "{name}{{{},{label}=\"{}\"}} {v}", proc_labels(i), esc(&k));
            }
        }
    }
}

impl Aggregator {
    /// The Prometheus text of every followed process, then the aggregator's own health.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let rows: Rows<'_> = self.procs.values().map(|p| (&p.info, &p.counters)).collect();
        let mut f = Family { out: &mut out };
        let some = |v: u64| Some(v.to_string());
        f.per_key(&rows, "dotnet_exceptions_total", "Exceptions thrown (ExceptionThrown events), by type.", "error_type", |c| {
            c.exceptions.iter().map(|(k, v)| (k.clone(), *v)).collect()
        });
        f.per_key(&rows, "dotnet_gc_collections_total", "Garbage collections (GCStart events), by condemned generation.", "gc_heap_generation", |c| {
            c.gc_collections.iter().map(|(g, v)| (format!("gen{g}"), *v)).collect()
        });
        f.per_process(&rows, "dotnet_gc_pause_time_seconds_total", "counter", "Time the runtime was suspended for GC (GCSuspendEEBegin to GCRestartEEEnd).", |c| {
            Some(secs(c.gc_pause_ns))
        });
        if self.cfg.alloc_bytes_from_counters {
            f.per_process(&rows, "dotnet_gc_heap_total_allocated_bytes_total", "counter", "Bytes allocated while followed (GC.GetTotalAllocatedBytes increments: the runtime's alloc-rate counter, at its last poll).", |c| {
                some(c.alloc_counter_bytes)
            });
        } else {
            f.per_process(&rows, "dotnet_gc_heap_total_allocated_bytes_total", "counter", "Bytes allocated, summed from AllocationTick events (100 KB granularity).", |c| {
                some(c.alloc_bytes)
            });
        }
        f.per_process(&rows, "dotnet_monitor_lock_contentions_total", "counter", "Lock contentions (ContentionStart events).", |c| some(c.contentions));
        f.per_process(&rows, "dotnet_jit_compiled_methods_total", "counter", "Methods JIT-compiled while followed (MethodLoad or MethodLoadVerbose events).", |c| {
            some(c.jit_methods)
        });
        f.per_process(&rows, "dotnet_thread_pool_thread_count", "gauge", "Thread-pool threads (ThreadPool.ThreadCount, the runtime's threadpool-thread-count counter).", |c| {
            c.thread_pool_threads.map(|v| v.to_string())
        });
        f.per_process(&rows, "dotnet_thread_pool_queue_length", "gauge", "Work items queued to the thread pool (ThreadPool.PendingWorkItemCount, threadpool-queue-length).", |c| {
            c.thread_pool_queue.map(|v| v.to_string())
        });
        f.per_process(&rows, "dotnet_thread_pool_work_item_count_total", "counter", "Thread-pool work items completed while followed (threadpool-completed-items-count increments).", |c| {
            c.thread_pool_threads.map(|_| c.thread_pool_completed.to_string())
        });
        f.head("dotnet_process_cpu_time_seconds_total", "counter", "CPU time of the process (the OS's user and system time).");
        for (i, c) in &rows {
            for (mode, ns) in [("user", c.cpu_user_ns), ("system", c.cpu_system_ns)] {
                let _ = writeln!(f.out, "dotnet_process_cpu_time_seconds_total{{{},cpu_mode=\"{mode}\"}} {}", proc_labels(i), secs(ns));
            }
        }
        f.head("clrprobe_gc_cpu_seconds_total", "counter", "CPU time spent on GC: on the dedicated GC threads, and on user threads inside their own GC pauses (CPU samples).");
        for (i, c) in &rows {
            for (kind, ns) in [("gc_threads", c.gc_threads_cpu_ns), ("user_threads", c.user_threads_gc_cpu_ns)] {
                let _ = writeln!(f.out, "clrprobe_gc_cpu_seconds_total{{{},thread_kind=\"{kind}\"}} {}", proc_labels(i), secs(ns));
            }
        }
        f.head("clrprobe_gc_pause_seconds", "histogram", "GC pauses (suspend to restart).");
        for (i, c) in &rows {
            let l = proc_labels(i);
            let mut cum = 0;
            for (b, n) in PAUSE_BUCKETS_S.iter().zip(c.gc_pause_buckets.iter()) {
                cum += n;
                let _ = writeln!(f.out, "clrprobe_gc_pause_seconds_bucket{{{l},le=\"{b}\"}} {cum}");
            }
            let _ = writeln!(f.out, "clrprobe_gc_pause_seconds_bucket{{{l},le=\"+Inf\"}} {}", c.gc_pauses);
            let _ = writeln!(f.out, "clrprobe_gc_pause_seconds_sum{{{l}}} {}", secs(c.gc_pause_ns));
            let _ = writeln!(f.out, "clrprobe_gc_pause_seconds_count{{{l}}} {}", c.gc_pauses);
        }
        f.per_process(&rows, "clrprobe_contention_wait_seconds_total", "counter", "Time threads waited for contended locks (ContentionStop).", |c| {
            Some(secs(c.contention_ns))
        });
        f.per_process(&rows, "clrprobe_offcpu_seconds_total", "counter", "Time threads spent off CPU in intervals over the minimum (sched_switch).", |c| {
            Some(secs(c.offcpu_ns))
        });
        f.per_process(&rows, "clrprobe_cpu_samples_total", "counter", "CPU samples taken in the process.", |c| some(c.cpu_samples));
        f.per_process(&rows, "clrprobe_dropped_events_total", "counter", "Runtime events the runtime dropped (EventPipe buffer full).", |c| {
            some(c.dropped_events)
        });
        f.per_process(&rows, "clrprobe_undecoded_events_total", "counter", "Runtime events that could not be decoded.", |c| some(c.decode_errors));
        f.head("clrprobe_alloc_sampled_ratio", "gauge", "Share of the time followed that allocation events were collected (slices); the allocs profile is scaled by its inverse.");
        for p in self.procs.values() {
            if let Some(s) = &p.alloc_slices {
                let now = p.exited_at.unwrap_or(self.now_ns).min(self.now_ns);
                let _ = writeln!(f.out, "clrprobe_alloc_sampled_ratio{{{}}} {}", proc_labels(&p.info), 1.0 / s.scale(now));
            }
        }
        let h = &self.health;
        f.head("clrprobe_lost_total", "counter", "Data the agent lost, by source.");
        for (source, n) in &h.lost {
            let _ = writeln!(f.out, "clrprobe_lost_total{{source=\"{source}\"}} {n}");
        }
        f.head("clrprobe_records_total", "counter", "Records the aggregator absorbed.");
        let _ = writeln!(f.out, "clrprobe_records_total {}", h.records);
        f.head("clrprobe_processes", "gauge", "Processes followed now (exited ones until their series end).");
        let _ = writeln!(f.out, "clrprobe_processes {}", self.procs.len());
        out
    }
}
