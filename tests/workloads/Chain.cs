// CPU for arg0 ms (default 3000) on three threads: the main thread loops Main -> Alpha ->
// Leaf (Alpha only calls Leaf); "Copier" copies large arrays in Chain::CopyBig (Array.Copy:
// libc memmove); "Mallocer" allocates native memory in Chain::MallocLoop (libc malloc/free).
// Prints "tid <name>=<tid>" for each.
using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

public static class Chain
{
    static double sink;
    static volatile bool stop;

    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Leaf(int n)
    {
        double x = 1.0;
        for (int i = 0; i < n; i++) { x = x * 1.0000001 + 0.5; if (x > 1e9) x = 1.0; }
        return x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Alpha(int n) { return Leaf(n); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CopyBig()
    {
        var a = new byte[8 << 20];
        var b = new byte[8 << 20];
        while (!stop) Array.Copy(a, b, a.Length);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MallocLoop()
    {
        var ptrs = new IntPtr[256];
        while (!stop)
        {
            for (int i = 0; i < ptrs.Length; i++) ptrs[i] = Marshal.AllocHGlobal(64 + i * 512);
            for (int i = 0; i < ptrs.Length; i++) Marshal.FreeHGlobal(ptrs[i]);
        }
    }

    public static int Main(string[] args)
    {
        int ms = Workload.IntArg(args, 0, 3000);
        Workload.Ready();
        Console.WriteLine("tid Main=" + GetTid());
        var copier = new Thread(() => { Console.WriteLine("tid Copier=" + GetTid()); CopyBig(); }) { Name = "Copier" };
        var mallocer = new Thread(() => { Console.WriteLine("tid Mallocer=" + GetTid()); MallocLoop(); }) { Name = "Mallocer" };
        copier.Start();
        mallocer.Start();
        var sw = Stopwatch.StartNew();
        while (sw.ElapsedMilliseconds < ms) sink += Alpha(200000);
        stop = true;
        copier.Join();
        mallocer.Join();
        Workload.Done();
        return 0;
    }
}
