// mcs: -r:System.Net.Http
// An HttpListener server on loopback and an HttpClient in one process. Once an EventPipe session
// has enabled TplEventSource (as `--http` does), or after arg3 ms (default 1500) without one, the
// client runs arg1 rounds (default 10); each round sends
// GET /fast (200), GET /slow?ms=<arg2> (the server waits arg2 ms, default 200, then 200) and
// GET /missing (404) concurrently, to host arg4 (default 127.0.0.1; `localhost` adds DNS lookups). Prints "port=<p>", then per path "count <path> <status> <n>"
// (the client's own tally), "elapsed_ms=<ms of the request loop>", "cpu_ms=<process CPU in it>",
// then "sent <total>".
using System;
using System.Collections.Generic;
using System.Diagnostics.Tracing;
using System.Net;
using System.Net.Http;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

public static class Http
{
    static int FreePort()
    {
        var l = new TcpListener(IPAddress.Loopback, 0);
        l.Start();
        int port = ((IPEndPoint)l.LocalEndpoint).Port;
        l.Stop();
        return port;
    }

    static bool TplEnabled()
    {
        foreach (var s in EventSource.GetSources())
            if (s.Name == "System.Threading.Tasks.TplEventSource" && s.IsEnabled()) return true;
        return false;
    }

    static void Serve(HttpListener listener, int slowMs)
    {
        while (listener.IsListening)
        {
            HttpListenerContext ctx;
            try { ctx = listener.GetContext(); } catch (Exception) { return; }
            ThreadPool.QueueUserWorkItem(_ => Answer(ctx, slowMs));
        }
    }

    static void Answer(HttpListenerContext ctx, int slowMs)
    {
        string path = ctx.Request.Url.AbsolutePath;
        int status = 200;
        string body = "ok " + path;
        if (path == "/slow") Thread.Sleep(slowMs);
        else if (path != "/fast") { status = 404; body = "not found"; }
        byte[] bytes = Encoding.UTF8.GetBytes(body);
        ctx.Response.StatusCode = status;
        ctx.Response.ContentLength64 = bytes.Length;
        ctx.Response.OutputStream.Write(bytes, 0, bytes.Length);
        ctx.Response.Close();
    }

    static async Task<int> Get(HttpClient client, string url)
    {
        using (HttpResponseMessage r = await client.GetAsync(url))
        {
            await r.Content.ReadAsStringAsync();
            return (int)r.StatusCode;
        }
    }

    public static int Main(string[] args)
    {
        double seconds = Workload.Seconds(args);
        int rounds = Workload.IntArg(args, 1, 10);
        int slowMs = Workload.IntArg(args, 2, 200);
        int startDelayMs = Workload.IntArg(args, 3, 1500);
        string host = args.Length > 4 ? args[4] : "127.0.0.1";
        int port = FreePort();
        var listener = new HttpListener();
        listener.Prefixes.Add("http://127.0.0.1:" + port + "/");
        listener.Prefixes.Add("http://localhost:" + port + "/");
        listener.Start();
        var server = new Thread(() => Serve(listener, slowMs));
        server.IsBackground = true;
        server.Start();
        Console.WriteLine("port=" + port);
        Workload.Ready();
        var clock = Workload.Clock();
        Task.Run(() => { }).Wait(); // creates TplEventSource
        while (clock.ElapsedMilliseconds < startDelayMs && !TplEnabled()) Thread.Sleep(10);
        Console.WriteLine("session=" + (TplEnabled() ? "on" : "off"));
        string root = "http://" + host + ":" + port;
        string[] paths = { "/fast", "/slow?ms=" + slowMs, "/missing" };
        var tally = new SortedDictionary<string, int>();
        int total = 0;
        var loop = Workload.Clock();
        TimeSpan cpu0 = System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime;
        using (var client = new HttpClient())
        {
            for (int i = 0; i < rounds; i++)
            {
                var tasks = new Task<int>[paths.Length];
                for (int p = 0; p < paths.Length; p++) tasks[p] = Get(client, root + paths[p]);
                Task.WaitAll(tasks);
                for (int p = 0; p < paths.Length; p++)
                {
                    string key = paths[p].Split('?')[0] + " " + tasks[p].Result;
                    int n;
                    tally.TryGetValue(key, out n);
                    tally[key] = n + 1;
                    total++;
                }
            }
        }
        double elapsedMs = loop.Elapsed.TotalMilliseconds;
        double cpuMs = (System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalMilliseconds;
        foreach (var kv in tally) Console.WriteLine("count " + kv.Key + " " + kv.Value);
        Console.WriteLine("elapsed_ms=" + elapsedMs.ToString(System.Globalization.CultureInfo.InvariantCulture));
        Console.WriteLine("cpu_ms=" + cpuMs.ToString(System.Globalization.CultureInfo.InvariantCulture));
        Console.WriteLine("sent " + total);
        Console.Out.Flush();
        while (clock.Elapsed.TotalSeconds < seconds) Thread.Sleep(50);
        listener.Stop();
        Workload.Done();
        return 0;
    }
}
