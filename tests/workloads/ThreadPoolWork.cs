// Queues known thread-pool work: after "ready" and a delay (arg1 ms, so a tracer can attach),
// arg2 work items (ThreadPool.QueueUserWorkItem), each spinning arg3 microseconds, waited for;
// then idles until the duration (arg0 seconds) ends. Prints, from the runtime's own counters
// (ThreadPool.* through reflection: mcs compiles against mono's mscorlib),
// "threadpool before=<completed items before> after=<completed items after the work>" once the
// work is done, and "threadpool threads=<ThreadPool.ThreadCount> queue=<PendingWorkItemCount>
// completed=<CompletedWorkItemCount>" a second before the end.
using System;
using System.Diagnostics;
using System.Threading;

public static class ThreadPoolWork
{
    static long Prop(string name)
    {
        var p = typeof(ThreadPool).GetProperty(name);
        return p == null ? -1 : Convert.ToInt64(p.GetValue(null, null));
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int delayMs = Workload.IntArg(args, 1, 0);
        int items = Workload.IntArg(args, 2, 1000);
        int spinUs = Workload.IntArg(args, 3, 100);
        Workload.Ready();
        var clock = Workload.Clock();
        Thread.Sleep(delayMs);
        long before = Prop("CompletedWorkItemCount");
        int left = items;
        using (var done = new ManualResetEvent(false))
        {
            for (int i = 0; i < items; i++)
            {
                ThreadPool.QueueUserWorkItem(_ =>
                {
                    var sw = Stopwatch.StartNew();
                    while (sw.Elapsed.TotalMilliseconds * 1000 < spinUs) { }
                    if (Interlocked.Decrement(ref left) == 0) done.Set();
                });
            }
            done.WaitOne();
        }
        // The last item's completion is counted after its callback returns.
        Thread.Sleep(200);
        Console.WriteLine("threadpool before=" + before + " after=" + Prop("CompletedWorkItemCount"));
        while (clock.Elapsed.TotalSeconds < seconds - 1) Thread.Sleep(50);
        Console.WriteLine("threadpool threads=" + Prop("ThreadCount") + " queue=" + Prop("PendingWorkItemCount") + " completed=" + Prop("CompletedWorkItemCount"));
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(50);
        Workload.Done();
        return 0;
    }
}
