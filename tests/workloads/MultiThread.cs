// arg1 (default 3) named worker threads "Worker0".., each spinning in its own method
// (WorkerLoop0/1/2 by index mod 3), printing "worker N tid=<os tid>".
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

public static class MultiThread
{
    static volatile bool stop;
    static double sink;

    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Burn(int n) { double x = 1; for (int i = 0; i < n; i++) x = x * 1.0000001 + 0.25; return x; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WorkerLoop0() { while (!stop) sink += Burn(50000); }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WorkerLoop1() { while (!stop) sink += Burn(50000); }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WorkerLoop2() { while (!stop) sink += Burn(50000); }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int n = Workload.IntArg(args, 1, 3);
        var threads = new Thread[n];
        for (int i = 0; i < n; i++)
        {
            int k = i;
            threads[i] = new Thread(() =>
            {
                Console.WriteLine("worker " + k + " tid=" + GetTid());
                if (k % 3 == 0) WorkerLoop0(); else if (k % 3 == 1) WorkerLoop1(); else WorkerLoop2();
            }) { Name = "Worker" + k };
            threads[i].Start();
        }
        Workload.Ready();
        var clock = Workload.Clock();
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(20);
        stop = true;
        foreach (var t in threads) t.Join();
        Workload.Done();
        return 0;
    }
}
