// Off-CPU time of a known length: after arg2 ms (default 1500), a new thread "Sleeper" sleeps
// arg1 times (default 20) for 100 ms each, then exits. Prints "sleeper tid=<tid>" and
// "slept_ns=<the thread's own measure of its sleeps>".
using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading;

public static class Sleeper
{
    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    public static int Main(string[] args)
    {
        int n = Workload.IntArg(args, 0, 20);
        int delayMs = Workload.IntArg(args, 1, 1500);
        Workload.Ready();
        Thread.Sleep(delayMs);
        long slept = 0;
        int tid = 0;
        var t = new Thread(() =>
        {
            tid = GetTid();
            long t0 = Stopwatch.GetTimestamp();
            for (int i = 0; i < n; i++) Thread.Sleep(100);
            slept = Stopwatch.GetTimestamp() - t0;
        }) { Name = "Sleeper" };
        t.Start();
        t.Join();
        Console.WriteLine("sleeper tid=" + tid);
        Console.WriteLine("slept_ns=" + (long)(slept * (1e9 / Stopwatch.Frequency)));
        Workload.Done();
        return 0;
    }
}
