// Overhead benchmark workloads, one per kind of runtime activity: `Bench MODE SECONDS WARMUP`.
// MODE: cpu (a spinning loop), alloc (small objects and 1 KiB arrays), throw (a throw and catch
// per ~130 µs of spinning, ≈ 6.5k/s), lock (two threads taking one lock held ~50 µs). Worker
// threads run from the start; rounds are counted only after WARMUP seconds (so a profiler's
// attach falls outside the window) and for SECONDS more. Prints "rounds=<n>" (rounds in the
// window), "per_second=<r>" and "per_cpu_second=<r>" (rounds per second of the whole process's
// CPU time in the window: what a profiler costs the app's own threads, the runtime's included,
// whatever else the machine runs).
using System;
using System.Runtime.CompilerServices;
using System.Threading;

public sealed class BenchNode { public long A, B; public BenchNode Next; }

public static class Bench
{
    static volatile bool stop;
    static long[] counts = new long[64];
    static object keep;
    public static object Kept { get { return keep; } }
    static double sink;
    static readonly object Gate = new object();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Spin(int n)
    {
        double x = 1.0;
        for (int i = 0; i < n; i++) { x = x * 1.0000001 + 0.5; if (x > 1e9) x = 1.0; }
        return x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Fail(long i) { throw new InvalidOperationException("round " + (i % 8)); }

    sealed class Job { public string Mode; public int Slot; }

    static void Work(object o)
    {
        var job = (Job)o;
        string mode = job.Mode;
        int slot = job.Slot;
        long n = 0;
        while (!stop)
        {
            switch (mode)
            {
                case "cpu":
                    sink += Spin(20000);
                    break;
                case "alloc":
                    BenchNode head = null;
                    for (int i = 0; i < 200; i++) head = new BenchNode { A = i, Next = head };
                    keep = new byte[1024];
                    keep = head;
                    break;
                case "throw":
                    sink += Spin(50000);
                    try { Fail(n); } catch (InvalidOperationException) { }
                    break;
                case "lock":
                    lock (Gate) { sink += Spin(20000); }
                    sink += Spin(2000);
                    break;
                default:
                    throw new ArgumentException("mode: cpu, alloc, throw or lock");
            }
            n++;
            Volatile.Write(ref counts[slot * 8], n);
        }
    }

    static long Total()
    {
        long t = 0;
        for (int i = 0; i < counts.Length; i += 8) t += Volatile.Read(ref counts[i]);
        return t;
    }

    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "cpu";
        double seconds = args.Length > 1 ? double.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 5.0;
        double warmup = args.Length > 2 ? double.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture) : 1.0;
        int threads = mode == "lock" ? 2 : 1;
        var workers = new Thread[threads];
        for (int i = 0; i < threads; i++) { workers[i] = new Thread(Work) { Name = "Bench" + i }; workers[i].Start(new Job { Mode = mode, Slot = i }); }
        Workload.Ready();
        Thread.Sleep(TimeSpan.FromSeconds(warmup));
        var me = System.Diagnostics.Process.GetCurrentProcess();
        long before = Total();
        var cpuBefore = me.TotalProcessorTime;
        var clock = Workload.Clock();
        Thread.Sleep(TimeSpan.FromSeconds(seconds));
        long rounds = Total() - before;
        double elapsed = clock.Elapsed.TotalSeconds;
        me.Refresh();
        double cpu = (me.TotalProcessorTime - cpuBefore).TotalSeconds;
        stop = true;
        foreach (var t in workers) t.Join();
        Console.WriteLine("rounds=" + rounds + " per_second=" + (rounds / elapsed).ToString("F1", System.Globalization.CultureInfo.InvariantCulture) + " per_cpu_second=" + (rounds / cpu).ToString("F1", System.Globalization.CultureInfo.InvariantCulture) + " sink=" + (sink > 0 ? 1 : 0));
        Workload.Done();
        return 0;
    }
}
