// Every kind clrprobe records, at once, for the output-format tests: the main thread spins in
// Mixed::Spin, allocating Node objects and throwing an InvalidOperationException every 500th
// round; a "Holder" thread holds a lock 20 ms at a time (off CPU in Thread.Sleep) while a
// "Waiter" thread contends for it. Runs arg0 seconds (default 6); prints "rounds=<n>".
using System;
using System.Runtime.CompilerServices;
using System.Threading;

public sealed class MixedNode { public long A; public MixedNode Next; }

public static class Mixed
{
    static readonly object Gate = new object();
    static volatile bool stop;
    static object keep;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Fail(long i) { throw new InvalidOperationException("round " + (i % 4)); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Spin(long rounds)
    {
        MixedNode head = null;
        for (int i = 0; i < 50; i++) head = new MixedNode { A = i, Next = head };
        keep = head;
        long x = rounds;
        for (int i = 0; i < 20000; i++) x = x * 6364136223846793005 + 1442695040888963407;
        if (rounds % 500 == 0) { try { Fail(rounds); } catch (InvalidOperationException) { } }
        return x;
    }

    static void Hold()
    {
        while (!stop)
        {
            lock (Gate) { Thread.Sleep(20); }
            Thread.Sleep(2);
        }
    }

    static void Wait()
    {
        while (!stop)
        {
            lock (Gate) { keep = new object(); }
            Thread.Sleep(1);
        }
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        var holder = new Thread(Hold) { Name = "Holder" };
        var waiter = new Thread(Wait) { Name = "Waiter" };
        holder.Start();
        waiter.Start();
        Workload.Ready();
        var clock = Workload.Clock();
        long rounds = 0, sink = 0;
        while (clock.Elapsed.TotalSeconds < seconds) sink += Spin(rounds++);
        stop = true;
        holder.Join();
        waiter.Join();
        Console.WriteLine("rounds=" + rounds + " sink=" + (sink & 1));
        Workload.Done();
        return 0;
    }
}
