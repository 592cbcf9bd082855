// Allocates five types of known sizes in known counts, after arg2 ms (default 1500) so a
// session can attach, for arg1 seconds (default 3). Per round: 400 One (24 B), 200 Four (48 B),
// 100 long[16] (152 B), 20 int[256] (1048 B), and every 10 rounds one double[20000]
// (160024 B, large object heap). Prints "count <type>=<n>" per type at the end, and
// "allocated before=<b> after=<a>" (GC.GetTotalAllocatedBytes() as the allocating starts and
// ends); then idles arg3 ms (default 0) before it exits.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

public sealed class One { public long A; }
public sealed class Four { public long A, B, C, D; }

public static class AllocTypes
{
    static object keep;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeOne(int n) { for (int i = 0; i < n; i++) keep = new One(); }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeFour(int n) { for (int i = 0; i < n; i++) keep = new Four(); }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeLongs(int n) { for (int i = 0; i < n; i++) keep = new long[16]; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeInts(int n) { for (int i = 0; i < n; i++) keep = new int[256]; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeLarge() { keep = new double[20000]; }

    // Through reflection: mcs compiles against mono's mscorlib.
    static long TotalAllocated()
    {
        var m = typeof(GC).GetMethod("GetTotalAllocatedBytes", new[] { typeof(bool) });
        return m == null ? -1 : Convert.ToInt64(m.Invoke(null, new object[] { false }));
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int delayMs = Workload.IntArg(args, 1, 1500);
        int lingerMs = Workload.IntArg(args, 2, 0);
        Workload.Ready();
        Thread.Sleep(delayMs);
        long before = TotalAllocated();
        var clock = Workload.Clock();
        long rounds = 0, large = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            MakeOne(400);
            MakeFour(200);
            MakeLongs(100);
            MakeInts(20);
            if (rounds % 10 == 0) { MakeLarge(); large++; }
            rounds++;
        }
        long after = TotalAllocated();
        Console.WriteLine("count One=" + rounds * 400);
        Console.WriteLine("count Four=" + rounds * 200);
        Console.WriteLine("count System.Int64[]=" + rounds * 100);
        Console.WriteLine("count System.Int32[]=" + rounds * 20);
        Console.WriteLine("count System.Double[]=" + large);
        Console.WriteLine("allocated before=" + before + " after=" + after);
        Thread.Sleep(lingerMs);
        Workload.Done();
        return keep == null ? 1 : 0;
    }
}
