// Context switches as fast as two threads can hand a token back and forth (AutoResetEvent
// ping-pong) for arg0 seconds (default 5), the main thread spinning arg1 microseconds (default
// 0) between hand-overs to switch less often. Prints "rounds=<hand-overs>" and
// "switches=<voluntary + involuntary context switches of the process's threads>" and
// "cpu_us=<the process's user + system CPU time over the hand-overs>" (the kernel's work on a
// switch, a profiler's sched_switch program included, is system time of the switching thread).
using System;
using System.IO;
using System.Threading;

public static class Switches
{
    static readonly AutoResetEvent Ping = new AutoResetEvent(false);
    static readonly AutoResetEvent Pong = new AutoResetEvent(false);
    static volatile bool stop;

    static long ContextSwitches()
    {
        long n = 0;
        foreach (var dir in Directory.GetDirectories("/proc/self/task"))
        {
            foreach (var line in File.ReadAllLines(Path.Combine(dir, "status")))
            {
                if (line.StartsWith("voluntary_ctxt_switches:") || line.StartsWith("nonvoluntary_ctxt_switches:"))
                    n += long.Parse(line.Substring(line.IndexOf(':') + 1).Trim());
            }
        }
        return n;
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        double spinUs = args.Length > 1 ? double.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 0;
        long spinTicks = (long)(spinUs * System.Diagnostics.Stopwatch.Frequency / 1e6);
        Workload.Ready();
        var echo = new Thread(() => { while (!stop) { Ping.WaitOne(); Pong.Set(); } }) { Name = "Echo" };
        echo.Start();
        long before = ContextSwitches();
        var cpuBefore = System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime;
        var clock = Workload.Clock();
        long rounds = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            if (spinTicks > 0)
            {
                long until = System.Diagnostics.Stopwatch.GetTimestamp() + spinTicks;
                while (System.Diagnostics.Stopwatch.GetTimestamp() < until) { }
            }
            Ping.Set();
            Pong.WaitOne();
            rounds++;
        }
        var cpu = System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime - cpuBefore;
        long switches = ContextSwitches() - before;
        stop = true;
        Ping.Set();
        echo.Join();
        Console.WriteLine("rounds=" + rounds);
        Console.WriteLine("switches=" + switches + " per_s=" + (long)(switches / seconds));
        Console.WriteLine("cpu_us=" + (long)(cpu.TotalMilliseconds * 1000));
        Workload.Done();
        return 0;
    }
}
