// Shared by every workload: argument parsing and the start-up protocol the test bed reads.
// Protocol on stdout: "pid=<pid>" then "ready", then workload-specific lines, then "done".
using System;
using System.Diagnostics;
using System.Threading;

public static class Workload
{
    // First argument: seconds to run (default 5).
    public static double Seconds(string[] args)
    {
        return args.Length > 0 ? double.Parse(args[0], System.Globalization.CultureInfo.InvariantCulture) : 5.0;
    }

    public static int IntArg(string[] args, int index, int fallback)
    {
        return args.Length > index ? int.Parse(args[index]) : fallback;
    }

    public static void Ready()
    {
        Console.WriteLine("pid=" + Process.GetCurrentProcess().Id);
        Console.WriteLine("runtime=" + Environment.Version);
        Console.WriteLine("ready");
        Console.Out.Flush();
    }

    public static void Done()
    {
        Console.WriteLine("done");
        Console.Out.Flush();
    }

    public static Stopwatch Clock()
    {
        return Stopwatch.StartNew();
    }
}
