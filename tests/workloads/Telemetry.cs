// A custom EventSource ("Clrprobe-Telemetry") that writes known events: arg1 (default 20)
// events "Work" with (name "item-<i>", count i, bytes i*1000, ratio i/4.0), after arg2 ms
// (default 1500) so a session can attach. Prints "sent <n>".
using System;
using System.Diagnostics.Tracing;
using System.Threading;

[EventSource(Name = "Clrprobe-Telemetry")]
public sealed class TelemetrySource : EventSource
{
    public static readonly TelemetrySource Log = new TelemetrySource();

    [Event(1, Level = EventLevel.Informational)]
    public void Work(string name, int count, long bytes, double ratio) { WriteEvent(1, name, count, bytes, ratio); }
}

public static class Telemetry
{
    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int n = Workload.IntArg(args, 1, 20);
        int delayMs = Workload.IntArg(args, 2, 1500);
        Workload.Ready();
        var clock = Workload.Clock();
        Thread.Sleep(delayMs);
        for (int i = 0; i < n; i++) TelemetrySource.Log.Work("item-" + i, i, i * 1000L, i / 4.0);
        Console.WriteLine("sent " + n);
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(50);
        Workload.Done();
        return 0;
    }
}
