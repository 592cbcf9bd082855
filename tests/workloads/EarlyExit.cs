// Exits early: prints ready, works for arg1 ms (default 300), then exits with code 3 while a
// profiler may still be attached.
using System;
using System.Threading;

public static class EarlyExit
{
    public static int Main(string[] args)
    {
        int ms = Workload.IntArg(args, 0, 300);
        Workload.Ready();
        var clock = Workload.Clock();
        double x = 1;
        while (clock.ElapsedMilliseconds < ms) x = x * 1.0000001 + 0.5;
        Console.WriteLine("exiting x=" + (x > 0 ? 1 : 0));
        return 3;
    }
}
