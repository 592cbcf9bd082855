// Holds a known object graph for heap snapshots: a linked list of `nodes` HeapListNode under the
// static field HeapRoots.Head, `arrays` HeapPayload[16] arrays in the static Dictionary
// HeapRoots.Arrays, and `leaves` HeapLeaf objects in the static array HeapRoots.Leaves (to make
// a large heap). A second thread allocates HeapGarbage objects it drops at once, all along.
// When the file `trigger` appears it is deleted and `grow` nodes are added to the list, then
// "grown nodes=<list length> garbage=<garbage objects allocated so far>" is printed. The list's
// last node is the key of a ConditionalWeakTable entry whose value is a HeapCwtValue.
// Prints "graph nodes=<n> arrays=<m> leaves=<l>" before "ready".
// Args: seconds (default 30), nodes, arrays, leaves, grow, trigger path.
using System;
using System.Collections.Generic;
using System.IO;
using System.Runtime.CompilerServices;
using System.Threading;

public sealed class HeapListNode { public long Value; public HeapListNode Next; }
public sealed class HeapPayload { public int X; }
public sealed class HeapLeaf { public long A; }
public sealed class HeapGarbage { public long A, B, C; }
public sealed class HeapCwtValue { public long A; }

public static class HeapRoots
{
    public static HeapListNode Head;
    public static Dictionary<int, HeapPayload[]> Arrays = new Dictionary<int, HeapPayload[]>();
    public static HeapLeaf[] Leaves;
    // The list's last node is the key of one entry: the value lives as long as that node (a
    // dependent handle; nothing references the value directly).
    public static System.Runtime.CompilerServices.ConditionalWeakTable<HeapListNode, HeapCwtValue> Attached =
        new System.Runtime.CompilerServices.ConditionalWeakTable<HeapListNode, HeapCwtValue>();
    public static long Garbage;
    static volatile bool stop;

    static int length;

    static void Grow(int n)
    {
        for (int i = 0; i < n; i++)
        {
            var node = new HeapListNode();
            node.Value = length++;
            node.Next = Head;
            Head = node;
        }
    }

    static void Churn()
    {
        long n = 0;
        while (!stop)
        {
            for (int i = 0; i < 1000; i++)
            {
                var g = new HeapGarbage();
                g.A = i;
            }
            n += 1000;
            Interlocked.Exchange(ref Garbage, n);
            Thread.Sleep(1);
        }
    }

    // Out of Main, so that no slot of Main's frame still holds one of these objects.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Build(int nodes, int arrays, int leaves)
    {
        Grow(nodes);
        var tail = Head;
        while (tail != null && tail.Next != null) tail = tail.Next;
        if (tail != null) Attached.Add(tail, new HeapCwtValue());
        for (int i = 0; i < arrays; i++)
        {
            var a = new HeapPayload[16];
            a[0] = new HeapPayload();
            Arrays[i] = a;
        }
        Leaves = new HeapLeaf[leaves];
        for (int i = 0; i < leaves; i++) Leaves[i] = new HeapLeaf();
    }

    public static int Main(string[] args)
    {
        double seconds = args.Length > 0 ? Workload.Seconds(args) : 30;
        int nodes = Workload.IntArg(args, 1, 1000);
        int arrays = Workload.IntArg(args, 2, 100);
        int leaves = Workload.IntArg(args, 3, 0);
        int grow = Workload.IntArg(args, 4, 100);
        string trigger = args.Length > 5 ? args[5] : null;
        Build(nodes, arrays, leaves);
        var churn = new Thread(Churn);
        churn.IsBackground = true;
        churn.Start();
        Console.WriteLine("graph nodes=" + nodes + " arrays=" + arrays + " leaves=" + leaves);
        Workload.Ready();
        var clock = Workload.Clock();
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            if (trigger != null && File.Exists(trigger))
            {
                File.Delete(trigger);
                Grow(grow);
                Console.WriteLine("grown nodes=" + length + " garbage=" + Interlocked.Read(ref Garbage));
                Console.Out.Flush();
            }
            Thread.Sleep(20);
        }
        stop = true;
        Console.WriteLine("garbage=" + Interlocked.Read(ref Garbage));
        Workload.Done();
        return 0;
    }
}
