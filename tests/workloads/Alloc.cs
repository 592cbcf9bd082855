// Allocates known types in known counts: per round, 1000 AllocSmall (managed object with four
// long fields), 10 byte[1000] and, every 100 rounds, one byte[100000] (LOH). Prints the totals
// and the bytes the runtime counted for the allocating thread ("allocated_bytes=").
// Args: seconds (default 5), delay ms after "ready" before allocating (default 0).
using System;
using System.Runtime.CompilerServices;

public sealed class AllocSmall { public long A, B, C, D; }

public static class Alloc
{
    static object keep;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocateSmall(int n) { for (int i = 0; i < n; i++) keep = new AllocSmall(); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocateArrays(int n) { for (int i = 0; i < n; i++) keep = new byte[1000]; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocateLarge() { keep = new byte[100000]; }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int delayMs = Workload.IntArg(args, 1, 0);
        // GC.GetAllocatedBytesForCurrentThread (CoreCLR) through reflection: mcs compiles
        // against mono's mscorlib.
        var allocated = typeof(GC).GetMethod("GetAllocatedBytesForCurrentThread");
        Workload.Ready();
        System.Threading.Thread.Sleep(delayMs);
        long before = (long)allocated.Invoke(null, null);
        var clock = Workload.Clock();
        long rounds = 0, large = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            AllocateSmall(1000);
            AllocateArrays(10);
            if (rounds % 100 == 0) { AllocateLarge(); large++; }
            rounds++;
        }
        long after = (long)allocated.Invoke(null, null);
        Console.WriteLine("allocated_bytes=" + (after - before));
        Console.WriteLine("alloc type=AllocSmall count=" + rounds * 1000);
        Console.WriteLine("alloc type=System.Byte[] count=" + (rounds * 10 + large) + " large=" + large);
        Workload.Done();
        return keep == null ? 1 : 0;
    }
}
