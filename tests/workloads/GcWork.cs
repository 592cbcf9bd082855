// Triggers garbage collections of known causes, in phases after "ready" and a delay:
// `induced` GC.Collect() calls (reason Induced, gen 2), then LOH churn — byte[200000] arrays
// dropped at once, so the large-object budget triggers gen-2 GCs (reason AllocLarge) — then,
// until `seconds` pass, small-object churn keeping a rolling window alive (gen 0/1 GCs).
// Prints, per induced GC, "induced gc=<index> pause_us=<runtime's pause time of it>" (the
// index is GC.CollectionCount(0) after it; the pause GC.GetTotalPauseDuration's increase),
// then "induced=<n>", "phase gcs=<first> <last> pause_us=<total pause of every GC of the
// phases>", "gc_count=<gen0> <gen1> <gen2>" (GC.CollectionCount), "sched run_ns=<r> wait_ns=<w>"
// (the main thread's time on a CPU and waiting for one over the phases, from
// /proc/self/schedstat: the share of the pauses a loaded machine lets it run) and "done".
// Args: seconds (default 5), delay ms after "ready" (default 0), induced GCs (default 5),
// LOH arrays (default 2000), MB of small objects kept alive throughout (default 0: a large
// live graph makes every full GC mark for long, on the GC threads under server GC).
using System;
using System.Runtime.CompilerServices;

public sealed class GcNode { public long A, B; public GcNode Next; }

public static class GcWork
{
    static object keep;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Induce() { GC.Collect(); }

    // GC.GetTotalPauseDuration (.NET 7+) through reflection: mcs compiles against mono's mscorlib.
    static readonly System.Reflection.MethodInfo TotalPause = typeof(GC).GetMethod("GetTotalPauseDuration");

    // The main thread's (run, run-queue wait) nanoseconds: /proc/self/schedstat is the leader's.
    static long[] Sched()
    {
        var f = System.IO.File.ReadAllText("/proc/self/schedstat").Split(' ');
        return new long[] { long.Parse(f[0]), long.Parse(f[1]) };
    }

    static long PauseUs() { return TotalPause == null ? -1 : (long)((TimeSpan)TotalPause.Invoke(null, null)).Ticks / 10; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocateLarge(int n) { for (int i = 0; i < n; i++) keep = new byte[200000]; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Churn(GcNode[] window, ref int slot)
    {
        for (int i = 0; i < 10000; i++)
        {
            var n = new GcNode();
            n.Next = window[slot];
            window[slot] = i % 8 == 0 ? n : window[slot];
            slot = (slot + 1) % window.Length;
        }
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int delayMs = Workload.IntArg(args, 1, 0);
        int induced = Workload.IntArg(args, 2, 5);
        int large = Workload.IntArg(args, 3, 2000);
        int liveMb = Workload.IntArg(args, 4, 0);
        GcNode live = null;
        for (long i = 0; i < (long)liveMb * 1000000 / 40; i++) { var n = new GcNode(); n.Next = live; live = n; }
        Workload.Ready();
        System.Threading.Thread.Sleep(delayMs);
        var clock = Workload.Clock();
        int firstGc = GC.CollectionCount(0) + 1;
        long phaseStart = PauseUs();
        long[] schedStart = Sched();
        for (int i = 0; i < induced; i++)
        {
            long before = PauseUs();
            Induce();
            Console.WriteLine("induced gc=" + GC.CollectionCount(0) + " pause_us=" + (PauseUs() - before));
            System.Threading.Thread.Sleep(20);
        }
        Console.WriteLine("induced=" + induced);
        AllocateLarge(large);
        var window = new GcNode[50000];
        int slot = 0;
        long rounds = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            Churn(window, ref slot);
            if (++rounds % 200 == 0) window = new GcNode[50000];
        }
        keep = live == null ? (object)window : live;
        long[] schedEnd = Sched();
        Console.WriteLine("phase gcs=" + firstGc + " " + GC.CollectionCount(0) + " pause_us=" + (PauseUs() - phaseStart));
        Console.WriteLine("gc_count=" + GC.CollectionCount(0) + " " + GC.CollectionCount(1) + " " + GC.CollectionCount(2));
        Console.WriteLine("sched run_ns=" + (schedEnd[0] - schedStart[0]) + " wait_ns=" + (schedEnd[1] - schedStart[1]));
        Workload.Done();
        return keep == null ? 1 : 0;
    }
}
