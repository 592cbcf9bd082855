// Throws known exceptions: arg1 = count of InvalidOperationException("boom"), arg2 = count of
// ArgumentException("bad argument"), arg4 = count of FormatException("bad format") (default 0),
// after arg3 ms; then waits out the duration (arg0 seconds).
using System;
using System.Runtime.CompilerServices;
using System.Threading;

public static class Exceptions
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowInvalid() { throw new InvalidOperationException("boom"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowArgument() { throw new ArgumentException("bad argument"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowFormat() { throw new FormatException("bad format"); }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int invalid = Workload.IntArg(args, 1, 100);
        int argument = Workload.IntArg(args, 2, 50);
        // Optional: seconds to wait after "ready" before throwing, so a tracer can attach.
        int delayMs = Workload.IntArg(args, 3, 0);
        int format = Workload.IntArg(args, 4, 0);
        Workload.Ready();
        var clock = Workload.Clock();
        Thread.Sleep(delayMs);
        int caughtInvalid = 0, caughtArgument = 0;
        for (int i = 0; i < invalid; i++) { try { ThrowInvalid(); } catch (InvalidOperationException) { caughtInvalid++; } }
        for (int i = 0; i < argument; i++) { try { ThrowArgument(); } catch (ArgumentException) { caughtArgument++; } }
        int caughtFormat = 0;
        for (int i = 0; i < format; i++) { try { ThrowFormat(); } catch (FormatException) { caughtFormat++; } }
        Console.WriteLine("thrown InvalidOperationException=" + caughtInvalid + " ArgumentException=" + caughtArgument + " FormatException=" + caughtFormat);
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(50);
        Workload.Done();
        return 0;
    }
}
