// JITs a brand-new method every interval: a DynamicMethod named "IpcJitStream_<n>" built with
// Reflection.Emit and invoked once, so the perf map / jitdump grow while it runs.
// Args: seconds (default 5), interval ms (default 50). Prints "jitted <n>" after each method.
using System;
using System.Reflection.Emit;
using System.Threading;

public static class IpcJitStream
{
    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int intervalMs = Workload.IntArg(args, 1, 50);
        Workload.Ready();
        var clock = Workload.Clock();
        int n = 0;
        long sum = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            var m = new DynamicMethod("IpcJitStream_" + n, typeof(int), Type.EmptyTypes);
            var il = m.GetILGenerator();
            il.Emit(OpCodes.Ldc_I4, n);
            il.Emit(OpCodes.Ret);
            sum += (int)m.Invoke(null, null);
            Console.WriteLine("jitted " + n);
            n++;
            Thread.Sleep(intervalMs);
        }
        Console.WriteLine("sum=" + sum);
        Workload.Done();
        return 0;
    }
}
