// Threads that block again and again, each in its own method, for arg0 ms (default 3000):
// "Monitor" in Blockers::InMonitorEnter (a lock "Holder" keeps 50 ms at a time), "Sleep" in
// Blockers::InSleep (Thread.Sleep(50)), "WaitOne" in Blockers::InWaitOne (WaitOne(50) on an
// event never set), "Socket" in Blockers::InSocketRead (blocking TCP receives of a byte the
// peer sends every 50 ms). Prints "tid <name>=<tid>" for each, then exits.
using System;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

public static class Blockers
{
    static readonly object Gate = new object();
    static readonly ManualResetEvent Event = new ManualResetEvent(false);
    static volatile bool stop;

    [DllImport("libc", EntryPoint = "gettid")]
    static extern int GetTid();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void InMonitorEnter() { while (!stop) { lock (Gate) { } Thread.Yield(); } }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void InSleep() { while (!stop) Thread.Sleep(50); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void InWaitOne() { while (!stop) Event.WaitOne(50); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void InSocketRead(Socket s) { var buf = new byte[1]; while (s.Receive(buf) == 1 && buf[0] == 0) { } }

    static Thread Start(string name, Action body, int[] tids, int i)
    {
        var t = new Thread(() => { tids[i] = GetTid(); body(); }) { Name = name };
        t.Start();
        return t;
    }

    public static int Main(string[] args)
    {
        int ms = Workload.IntArg(args, 0, 3000);
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        client.Connect((IPEndPoint)listener.LocalEndpoint);
        var server = listener.AcceptSocket();
        Workload.Ready();
        var tids = new int[4];
        var holder = new Thread(() => { while (!stop) { lock (Gate) Thread.Sleep(50); Thread.Sleep(1); } }) { Name = "Holder" };
        holder.Start();
        var threads = new[] {
            Start("Monitor", InMonitorEnter, tids, 0),
            Start("Sleep", InSleep, tids, 1),
            Start("WaitOne", InWaitOne, tids, 2),
            Start("Socket", () => InSocketRead(client), tids, 3),
        };
        var sw = Stopwatch.StartNew();
        while (sw.ElapsedMilliseconds < ms)
        {
            Thread.Sleep(50);
            server.Send(new byte[1]);
        }
        stop = true;
        server.Send(new byte[] { 1 });
        holder.Join();
        foreach (var t in threads) t.Join();
        Console.WriteLine("tid Monitor=" + tids[0]);
        Console.WriteLine("tid Sleep=" + tids[1]);
        Console.WriteLine("tid WaitOne=" + tids[2]);
        Console.WriteLine("tid Socket=" + tids[3]);
        Workload.Done();
        return 0;
    }
}
