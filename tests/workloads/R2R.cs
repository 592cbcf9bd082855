// Burns CPU inside precompiled (ReadyToRun) CoreLib code: Convert.ToBase64String over a 64 KiB
// buffer and string hashing, called from a small managed loop. Run with
// DOTNET_TC_CallCountingDelayMs=600000 to keep the R2R code from being re-jitted at Tier1.
using System;
using System.Runtime.CompilerServices;

public static class R2R
{
    static long sink;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Encode(byte[] data) { sink += Convert.ToBase64String(data).Length; }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        var data = new byte[64 * 1024];
        new Random(42).NextBytes(data);
        Workload.Ready();
        var clock = Workload.Clock();
        while (clock.Elapsed.TotalSeconds < seconds) Encode(data);
        Console.WriteLine("sink=" + (sink > 0 ? 1 : 0));
        Workload.Done();
        return 0;
    }
}
