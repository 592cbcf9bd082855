// Two threads on one lock, with the waiting time measured by the waiter itself: after arg2 ms
// (default 1500), "Holder" takes the lock and keeps it arg1 ms (default 40) while "Waiter",
// started once the lock is held, blocks on it; repeated arg3 times (default 25). Prints
// "holder tid=<tid>", "waiter tid=<tid>" and "waited_ns=<total the waiter spent in lock()>".
using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading;

public static class LockWait
{
    static readonly object Gate = new object();

    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    public static int Main(string[] args)
    {
        int holdMs = Workload.IntArg(args, 0, 40);
        int delayMs = Workload.IntArg(args, 1, 1500);
        int rounds = Workload.IntArg(args, 2, 25);
        Workload.Ready();
        Thread.Sleep(delayMs);
        long waitedTicks = 0;
        int waiterTid = 0, holderTid = 0;
        var held = new ManualResetEventSlim(false);
        var release = new ManualResetEventSlim(false);
        var holder = new Thread(() =>
        {
            holderTid = GetTid();
            for (int i = 0; i < rounds; i++)
            {
                lock (Gate)
                {
                    held.Set();
                    Thread.Sleep(holdMs);
                }
                release.Wait();
                release.Reset();
            }
        }) { Name = "Holder" };
        var waiter = new Thread(() =>
        {
            waiterTid = GetTid();
            for (int i = 0; i < rounds; i++)
            {
                held.Wait();
                held.Reset();
                long t0 = Stopwatch.GetTimestamp();
                lock (Gate) { waitedTicks += Stopwatch.GetTimestamp() - t0; }
                release.Set();
            }
        }) { Name = "Waiter" };
        holder.Start();
        waiter.Start();
        holder.Join();
        waiter.Join();
        Console.WriteLine("holder tid=" + holderTid);
        Console.WriteLine("waiter tid=" + waiterTid);
        Console.WriteLine("waited_ns=" + (long)(waitedTicks * (1e9 / Stopwatch.Frequency)));
        Workload.Done();
        return 0;
    }
}
