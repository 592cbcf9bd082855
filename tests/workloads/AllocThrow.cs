// An allocation- and exception-heavy loop for overhead benchmarks: per round, 200 small
// objects and a 1 KiB array; every 200th round (~2k/s) throws and catches an exception. Runs arg1
// seconds (default 6) and prints "rounds=<n>". (At every 20th round, ~20k exceptions/s here,
// recording exceptions cost 30-45 %: measured, see the README.)
using System;
using System.Runtime.CompilerServices;

public sealed class Node { public long A, B; public Node Next; }

public static class AllocThrow
{
    static object keep;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Fail(long i) { throw new InvalidOperationException("round " + (i % 8)); }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        Workload.Ready();
        var clock = Workload.Clock();
        long rounds = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            Node head = null;
            for (int i = 0; i < 200; i++) head = new Node { A = i, Next = head };
            keep = new byte[1024];
            keep = head;
            if (rounds % 200 == 0) { try { Fail(rounds); } catch (InvalidOperationException) { } }
            rounds++;
        }
        Console.WriteLine("rounds=" + rounds);
        Workload.Done();
        return 0;
    }
}
