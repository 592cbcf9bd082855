// Lock contention with known hold times: a "Holder" thread takes the lock and holds it for
// arg1 ms (default 50), then releases it for 1 ms; arg2 (default 2) "Waiter" threads take the
// same lock in a loop. Prints "holder tid=<os tid>" so owners can be checked.
using System;
using System.Runtime.InteropServices;
using System.Threading;

public static class Contention
{
    static readonly object Gate = new object();
    static volatile bool stop;
    static long acquisitions;

    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    static void Hold(object holdMs)
    {
        Console.WriteLine("holder tid=" + GetTid());
        int ms = (int)holdMs;
        while (!stop)
        {
            lock (Gate) { Thread.Sleep(ms); }
            Thread.Sleep(1);
        }
    }

    static void Wait()
    {
        while (!stop)
        {
            lock (Gate) { Interlocked.Increment(ref acquisitions); }
            Thread.Sleep(1);
        }
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int holdMs = Workload.IntArg(args, 1, 50);
        int waiters = Workload.IntArg(args, 2, 2);
        var holder = new Thread(Hold) { Name = "Holder" };
        holder.Start(holdMs);
        var threads = new Thread[waiters];
        for (int i = 0; i < waiters; i++) { threads[i] = new Thread(Wait) { Name = "Waiter" + i }; threads[i].Start(); }
        Workload.Ready();
        var clock = Workload.Clock();
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(20);
        stop = true;
        holder.Join();
        foreach (var t in threads) t.Join();
        Console.WriteLine("acquisitions=" + acquisitions);
        Workload.Done();
        return 0;
    }
}
