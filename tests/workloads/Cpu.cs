// CPU-bound hot methods with a known split: HotA does 3 units of work for every 1 of HotB,
// so about 75 % of samples land in HotA and 25 % in HotB. Prints "tick N" every 100 ms
// (a libc write(2) per tick, for uprobe tests).
using System;
using System.Runtime.CompilerServices;

public static class Cpu
{
    static double sink;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Spin(int n)
    {
        double x = 1.0;
        for (int i = 0; i < n; i++) { x = x * 1.0000001 + 0.5; if (x > 1e9) x = 1.0; }
        return x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void HotA() { sink += Spin(300000); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void HotB() { sink += Spin(100000); }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        Workload.Ready();
        var clock = Workload.Clock();
        long nextTick = 100, ticks = 0, rounds = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            HotA();
            HotB();
            rounds++;
            if (clock.ElapsedMilliseconds >= nextTick)
            {
                Console.WriteLine("tick " + (++ticks));
                nextTick += 100;
            }
        }
        Console.WriteLine("rounds=" + rounds + " sink=" + (sink > 0 ? 1 : 0));
        Workload.Done();
        return 0;
    }
}
