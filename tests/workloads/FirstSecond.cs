// Start-up work that only a profiler attached from the first instruction sees: Main calls
// FirstSecond() straight away, then Rest(); both do the same fixed amount of work (arg1
// million loop iterations each, default 150: about a second each on one free core), so their
// sample counts match whatever else runs on the machine. Prints "first done" between them.
using System;
using System.Runtime.CompilerServices;

public static class FirstSecondApp
{
    static double sink;

    // Each phase has its own loop (a shared callee would be reached by a tail call, hiding
    // the phase's frame).
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void FirstSecond(long iterations)
    {
        double x = 1.0;
        for (long i = 0; i < iterations; i++) { x = x * 1.0000001 + 0.5; if (x > 1e9) x = 1.0; }
        sink += x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Rest(long iterations)
    {
        double x = 2.0;
        for (long i = 0; i < iterations; i++) { x = x * 1.0000001 + 0.5; if (x > 1e9) x = 1.0; }
        sink += x;
    }

    public static int Main(string[] args)
    {
        long n = Workload.IntArg(args, 0, 150) * 1000000L;
        FirstSecond(n);
        Console.WriteLine("first done");
        Rest(n);
        Console.WriteLine("sink=" + (sink > 0 ? 1 : 0));
        Workload.Done();
        return 0;
    }
}
